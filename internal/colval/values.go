package colval

import (
	"reflect"
	"strconv"
	"time"
)

// ValueString renders a decoded binlog or SQL value as text. go-mysql gives
// VARCHAR as string, TEXT/BLOB as []byte and integers as the column's Go
// integer type (each width, signed or not: read through reflect, which
// covers them all in one case).
func ValueString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	switch r := reflect.ValueOf(v); {
	case r.CanInt():
		return strconv.FormatInt(r.Int(), 10)
	case r.CanUint():
		return strconv.FormatUint(r.Uint(), 10)
	}
	return ""
}

// ValueStringIn is ValueString with times in loc, as RFC 3339: the text of
// a value in a header, a route template or a message id, where a
// DATETIME reads in the table's route.time_zone.
func ValueStringIn(v any, loc *time.Location) string {
	if tm, ok := v.(time.Time); ok {
		return tm.In(loc).Format(time.RFC3339Nano)
	}
	return ValueString(v)
}

// ValueBytes returns a value as bytes, copying so the result never aliases a
// binlog packet buffer.
func ValueBytes(v any) []byte {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		return append([]byte(nil), x...)
	case string:
		return []byte(x)
	default:
		return []byte(ValueString(v))
	}
}

// ValueUint64 converts an id column to uint64 (BIGINT UNSIGNED ids included).
func ValueUint64(v any) (uint64, bool) {
	switch x := v.(type) {
	case string:
		n, err := strconv.ParseUint(x, 10, 64)
		return n, err == nil
	case []byte:
		n, err := strconv.ParseUint(string(x), 10, 64)
		return n, err == nil
	}
	switch r := reflect.ValueOf(v); {
	case r.CanInt():
		return uint64(r.Int()), r.Int() >= 0
	case r.CanUint():
		return r.Uint(), true
	}
	return 0, false
}

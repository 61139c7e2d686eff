package outbox

import (
	"strconv"
	"time"
)

// ValueString renders a decoded binlog or SQL value as text. go-mysql gives
// VARCHAR as string, TEXT/BLOB as []byte and integers as the column's Go
// integer type.
func ValueString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	default:
		return ""
	}
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
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	case int:
		return uint64(x), x >= 0
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case string:
		n, err := strconv.ParseUint(x, 10, 64)
		return n, err == nil
	case []byte:
		n, err := strconv.ParseUint(string(x), 10, 64)
		return n, err == nil
	default:
		return 0, false
	}
}

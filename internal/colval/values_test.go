package colval

import (
	"bytes"
	"math"
	"testing"
	"time"
)

func TestValueString(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{nil, ""},
		{"PENDING", "PENDING"},
		{[]byte("漢字 😀"), "漢字 😀"},
		{int8(-1), "-1"},
		{int16(2), "2"},
		{int32(3), "3"},
		{int64(math.MinInt64), "-9223372036854775808"},
		{int(-7), "-7"},
		{uint8(255), "255"},
		{uint16(65535), "65535"},
		{uint32(math.MaxUint32), "4294967295"},
		{uint64(math.MaxUint64), "18446744073709551615"},
		{float64(1.5), "1.5"},
		{true, ""}, // not a type a column decodes to
		{time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), "2024-01-02T02:04:05Z"},
	} {
		if got := ValueString(c.v); got != c.want {
			t.Errorf("ValueString(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestValueBytesCopies(t *testing.T) {
	buf := []byte{0, 1, 2, 0xff}
	got := ValueBytes(buf)
	buf[0] = 9
	if !bytes.Equal(got, []byte{0, 1, 2, 0xff}) {
		t.Fatalf("ValueBytes aliases its input: %v", got)
	}
	if got := ValueBytes(""); got == nil || len(got) != 0 {
		t.Fatalf("empty string: %#v", got)
	}
	if got := ValueBytes(nil); got != nil {
		t.Fatalf("nil: %#v", got)
	}
}

func TestValueUint64(t *testing.T) {
	for _, c := range []struct {
		v    any
		want uint64
		ok   bool
	}{
		{uint64(math.MaxUint64), math.MaxUint64, true},
		{int64(5), 5, true},
		{int64(-5), 0, false},
		{int8(-1), 0, false},
		{int32(7), 7, true},
		{uint16(9), 9, true},
		{1.5, 0, false},
		{"18446744073709551615", math.MaxUint64, true},
		{[]byte("42"), 42, true},
		{"uuid-ish", 0, false},
		{nil, 0, false},
	} {
		got, ok := ValueUint64(c.v)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ValueUint64(%#v) = %d, %v", c.v, got, ok)
		}
	}
}

// A time renders in the zone given (a table's route.time_zone), anything
// else as ValueString renders it.
func TestValueStringInUsesTheZone(t *testing.T) {
	instant := time.Date(2024, 2, 29, 15, 59, 58, 123000000, time.UTC)
	if got := ValueStringIn(instant, time.UTC); got != "2024-02-29T15:59:58.123Z" {
		t.Fatalf("UTC: %s", got)
	}
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	if got := ValueStringIn(instant, shanghai); got != "2024-02-29T23:59:58.123+08:00" {
		t.Fatalf("Shanghai: %s", got)
	}
	if got := ValueStringIn(uint64(18446744073709551615), shanghai); got != "18446744073709551615" {
		t.Fatalf("uint64: %s", got)
	}
}

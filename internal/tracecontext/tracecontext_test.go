package tracecontext

import (
	"context"
	"errors"
	"strings"
	"testing"
)

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParseTraceparent(t *testing.T) {
	for _, tc := range []struct {
		in, err string // err: a part of the error; "" for valid
	}{
		{validTP, ""},
		{"  " + validTP + "\n", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", ""},
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds", ""},
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"", "0 characters"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "characters, want 55"},
		{validTP + "-00", "version 00 has exactly 55"},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"},
		{"0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version"},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "trace id is not 32 lowercase"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01", "parent id is not 16 lowercase"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", "flags"},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "trace id is all zeros"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "parent id is all zeros"},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "want 00-"},
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.more", "must follow a '-'"},
	} {
		sc, err := ParseTraceparent(tc.in)
		if tc.err == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.in, err)
			} else if sc.TraceID.String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID.String() != "00f067aa0ba902b7" {
				t.Errorf("%q parsed as %s %s", tc.in, sc.TraceID, sc.SpanID)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.err)
		}
	}
	sc, _ := ParseTraceparent(validTP)
	if !sc.Sampled() || sc.Traceparent() != validTP {
		t.Errorf("sampled %v, traceparent %q", sc.Sampled(), sc.Traceparent())
	}
}

func TestValidTracestate(t *testing.T) {
	long := strings.Repeat("a", 256)
	var many []string
	for i := range 33 {
		many = append(many, "k"+strings.Repeat("x", i)+"=v")
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"rojo=00f067aa0ba902b7", true},
		{"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", true},
		{" rojo=1 ,\tcongo=2 ,, ", true},
		{"tenant@vendor=x", true},
		{"1tenant@vendor=x", true},
		{"a/b*c_d-e=v v", true},
		{"k=" + long, true},
		{strings.Join(many[:32], ","), true},
		{strings.Join(many, ","), false},
		{"Rojo=1", false},
		{"1rojo=1", false},
		{"rojo", false},
		{"=1", false},
		{"rojo=", false},
		{"rojo=a=b", false},
		{"rojo=a ", true}, // a trailing space is whitespace around the list, not part of the value
		{"rojo=\x01", false},
		{"rojo=é", false},
		{"k=" + long + "a", false},
		{"rojo=1,rojo=2", false},
		{"t@Vendor=1", false},
		{"t@vendorwaytoolong=1", false},
	} {
		err := ValidTracestate(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok=%v", tc.in, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrTracestate) {
			t.Errorf("%q: %v does not wrap ErrTracestate", tc.in, err)
		}
	}
}

// An invalid tracestate is dropped and reported; the traceparent stands.
func TestParseKeepsTraceparentWithoutBadTracestate(t *testing.T) {
	sc, tsErr, err := Parse(validTP, "Bad=1")
	if err != nil || tsErr == nil || sc.TraceState != "" || sc.TraceID.String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("Parse = %+v, %v, %v", sc, tsErr, err)
	}
	sc, tsErr, err = Parse(validTP, "rojo=1")
	if err != nil || tsErr != nil || sc.TraceState != "rojo=1" {
		t.Fatalf("Parse = %+v, %v, %v", sc, tsErr, err)
	}
	ctx := NewContext(context.Background(), sc)
	if got, ok := FromContext(ctx); !ok || got != sc {
		t.Fatalf("FromContext = %+v %v", got, ok)
	}
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("an empty context carries a span context")
	}
}

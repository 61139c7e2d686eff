// Package tracecontext reads W3C Trace Context (https://www.w3.org/TR/trace-context/):
// it validates and parses the traceparent and tracestate values, and carries a parsed
// one in a context.Context. The relay checks a row's trace context with it before
// publishing it as AMQP headers; pkg/inbox puts the one a message carries into its
// handler's context.
//
// It is a few hundred lines of the standard library on purpose: a consumer using
// pkg/inbox gets the trace id of each message without taking on a tracing library.
// Applications on OpenTelemetry use pkg/inbox/otelinbox, which hands the same headers
// to an OpenTelemetry propagator.
package tracecontext

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Header names, as the W3C Trace Context HTTP headers are named.
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// TraceID is a trace's 16-byte id.
type TraceID [16]byte

// String is the id in lowercase hex, as a traceparent writes it.
func (id TraceID) String() string { return hex.EncodeToString(id[:]) }

// SpanID is a span's 8-byte id.
type SpanID [8]byte

// String is the id in lowercase hex.
func (id SpanID) String() string { return hex.EncodeToString(id[:]) }

// SpanContext is a parsed traceparent and the tracestate that came with it.
type SpanContext struct {
	Version byte
	TraceID TraceID
	// SpanID is the traceparent's parent-id: the span of the producer that wrote the
	// message, the parent of the consumer's span.
	SpanID SpanID
	Flags  byte
	// TraceState is the validated tracestate value, "" when there was none or it was
	// invalid (a traceparent stands without it).
	TraceState string
}

// Sampled reports the sampled flag: the producer recorded its span.
func (s SpanContext) Sampled() bool { return s.Flags&1 == 1 }

// Traceparent is the version-00 traceparent of the span context.
func (s SpanContext) Traceparent() string {
	return fmt.Sprintf("00-%s-%s-%02x", s.TraceID, s.SpanID, s.Flags)
}

// ParseTraceparent parses a traceparent value. Surrounding whitespace is ignored;
// anything else the W3C format does not allow is an error saying what: upper-case hex,
// a wrong length, version ff, an all-zero trace or parent id. A version above 00 is
// read by its version-00 fields, as the specification asks.
func ParseTraceparent(v string) (SpanContext, error) {
	var sc SpanContext
	v = strings.TrimSpace(v)
	if len(v) < 55 {
		return sc, fmt.Errorf("traceparent %q: %d characters, want 55 (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>)", clip(v), len(v))
	}
	ver, ok := hexByte(v[0:2])
	switch {
	case !ok:
		return sc, fmt.Errorf("traceparent %q: version %q is not two lowercase hex digits", clip(v), v[0:2])
	case ver == 0xff:
		return sc, fmt.Errorf("traceparent %q: version ff is invalid", clip(v))
	case ver == 0 && len(v) != 55:
		return sc, fmt.Errorf("traceparent %q: %d characters, version 00 has exactly 55", clip(v), len(v))
	case len(v) > 55 && v[55] != '-':
		return sc, fmt.Errorf("traceparent %q: fields after the flags must follow a '-'", clip(v))
	case v[2] != '-' || v[35] != '-' || v[52] != '-':
		return sc, fmt.Errorf("traceparent %q: want 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>", clip(v))
	}
	sc.Version = ver
	if !decodeLowerHex(sc.TraceID[:], v[3:35]) {
		return sc, fmt.Errorf("traceparent %q: trace id is not 32 lowercase hex digits", clip(v))
	}
	if !decodeLowerHex(sc.SpanID[:], v[36:52]) {
		return sc, fmt.Errorf("traceparent %q: parent id is not 16 lowercase hex digits", clip(v))
	}
	if sc.Flags, ok = hexByte(v[53:55]); !ok {
		return sc, fmt.Errorf("traceparent %q: flags are not two lowercase hex digits", clip(v))
	}
	if sc.TraceID == (TraceID{}) {
		return sc, fmt.Errorf("traceparent %q: the trace id is all zeros", clip(v))
	}
	if sc.SpanID == (SpanID{}) {
		return sc, fmt.Errorf("traceparent %q: the parent id is all zeros", clip(v))
	}
	return sc, nil
}

// ErrTracestate marks an invalid tracestate value.
var ErrTracestate = errors.New("invalid tracestate")

// maxTracestateMembers is the most list members a tracestate holds.
const maxTracestateMembers = 32

// ValidTracestate checks a tracestate value: at most 32 comma-separated key=value
// members (empty ones allowed), keys lowercase as the specification spells them
// (tenant@system allowed) and unique, values of 1 to 256 printable ASCII characters
// without ',' or '=' and not ending in a space.
func ValidTracestate(v string) error {
	seen := map[string]bool{}
	members := 0
	for _, m := range strings.Split(v, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		if members++; members > maxTracestateMembers {
			return fmt.Errorf("%w %q: more than %d members", ErrTracestate, clip(v), maxTracestateMembers)
		}
		key, val, ok := strings.Cut(m, "=")
		if !ok {
			return fmt.Errorf("%w %q: member %q is not key=value", ErrTracestate, clip(v), clip(m))
		}
		if !validKey(key) {
			return fmt.Errorf("%w %q: key %q", ErrTracestate, clip(v), clip(key))
		}
		if !validValue(val) {
			return fmt.Errorf("%w %q: the value of %q", ErrTracestate, clip(v), clip(key))
		}
		if seen[key] {
			return fmt.Errorf("%w %q: key %q appears twice", ErrTracestate, clip(v), clip(key))
		}
		seen[key] = true
	}
	return nil
}

// Parse parses a traceparent and its tracestate. An invalid traceparent is an error;
// an invalid tracestate is dropped (the span context stands without it, as the
// specification asks) and reported in tsErr.
func Parse(traceparent, tracestate string) (sc SpanContext, tsErr, err error) {
	if sc, err = ParseTraceparent(traceparent); err != nil {
		return sc, nil, err
	}
	tracestate = strings.Trim(tracestate, " \t")
	if tracestate == "" {
		return sc, nil, nil
	}
	if tsErr = ValidTracestate(tracestate); tsErr == nil {
		sc.TraceState = tracestate
	}
	return sc, tsErr, nil
}

type ctxKey struct{}

// NewContext returns ctx carrying sc.
func NewContext(ctx context.Context, sc SpanContext) context.Context {
	return context.WithValue(ctx, ctxKey{}, sc)
}

// FromContext returns the span context ctx carries, if any.
func FromContext(ctx context.Context) (SpanContext, bool) {
	sc, ok := ctx.Value(ctxKey{}).(SpanContext)
	return sc, ok
}

// validKey: simple-key = lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/"), or
// tenant-id "@" system-id with tenant-id = (lcalpha / DIGIT) 0*240(...) and
// system-id = lcalpha 0*13(...).
func validKey(k string) bool {
	if k == "" {
		return false
	}
	tenant, system, multi := strings.Cut(k, "@")
	if !multi {
		return len(k) <= 256 && isLower(k[0]) && keyChars(k[1:])
	}
	return len(tenant) >= 1 && len(tenant) <= 241 && (isLower(tenant[0]) || isDigit(tenant[0])) && keyChars(tenant[1:]) &&
		len(system) >= 1 && len(system) <= 14 && isLower(system[0]) && keyChars(system[1:])
}

func keyChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isLower(c) && !isDigit(c) && c != '_' && c != '-' && c != '*' && c != '/' {
			return false
		}
	}
	return true
}

// validValue: 1 to 256 characters of %x20-2B / %x2D-3C / %x3E-7E, the last not a space.
func validValue(v string) bool {
	if len(v) == 0 || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func hexByte(s string) (byte, bool) {
	var b [1]byte
	if !decodeLowerHex(b[:], s) {
		return 0, false
	}
	return b[0], true
}

// decodeLowerHex decodes s into dst, accepting only lowercase hex digits (the
// specification refuses upper case).
func decodeLowerHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

// clip keeps error messages short when a column holds something long.
func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

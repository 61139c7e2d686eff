package inbox

// A message's AMQP headers: kept in the inbox table so the retry task
// republishes them with the body (a trace context, CloudEvents attributes,
// whatever the producer set), and the W3C trace context among them put into
// the handler's context.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/tracecontext"
)

// RetryCountHeader is set on every message the retry task republishes: how many
// times it has been.
const RetryCountHeader = "x-inbox-retry-count"

// brokerHeader reports headers the broker sets on a delivery (dead-lettering,
// quorum queue redeliveries) and the inbox's own: a republished message must
// not carry them over.
func brokerHeader(k string) bool {
	return k == "x-death" || k == "x-delivery-count" || k == RetryCountHeader ||
		strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")
}

// encodeHeaders renders headers for the headers column as JSON, each value
// with its AMQP field type so a republish sends exactly what arrived:
// {"traceparent":["string","00-..."],"n":["int32",3]}. nil (NULL) when there
// is nothing to keep.
func encodeHeaders(h amqp.Table) any {
	out := map[string][2]any{}
	for k, v := range h {
		if brokerHeader(k) {
			continue
		}
		out[k] = typed(v)
	}
	if len(out) == 0 {
		return nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil // typed makes every value marshalable
	}
	return string(b)
}

// typed pairs a header value with its type name.
func typed(v any) [2]any {
	if t := reflect.TypeOf(v); t != nil && numberTypes[t.String()] == t {
		return [2]any{t.String(), v}
	}
	switch x := v.(type) {
	case nil:
		return [2]any{"null", nil}
	case string:
		if utf8.ValidString(x) {
			return [2]any{"string", x}
		}
		return [2]any{"string64", base64.StdEncoding.EncodeToString([]byte(x))}
	case []byte:
		return [2]any{"bytes", base64.StdEncoding.EncodeToString(x)}
	case bool:
		return [2]any{"bool", x}
	case int:
		return [2]any{"int64", int64(x)}
	case amqp.Decimal:
		return [2]any{"decimal", [2]any{x.Scale, x.Value}}
	case time.Time:
		return [2]any{"time", x.UTC().Format(time.RFC3339Nano)}
	case []any:
		arr := make([][2]any, len(x))
		for i, e := range x {
			arr[i] = typed(e)
		}
		return [2]any{"array", arr}
	case amqp.Table:
		t := map[string][2]any{}
		for k, e := range x {
			t[k] = typed(e)
		}
		return [2]any{"table", t}
	default:
		return [2]any{"string", fmt.Sprint(x)}
	}
}

// decodeHeaders reads what encodeHeaders wrote.
func decodeHeaders(raw []byte) (amqp.Table, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var in map[string][2]json.RawMessage
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("headers column: %w", err)
	}
	return decodeTable(in)
}

func decodeTable(in map[string][2]json.RawMessage) (amqp.Table, error) {
	out := amqp.Table{}
	for k, tv := range in {
		v, err := untyped(tv)
		if err != nil {
			return nil, fmt.Errorf("headers column: %q: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// numberTypes are the numeric AMQP header types, by the name typed writes
// them under: their Go type's, the one the AMQP client decodes the field
// type into (a Go int, which AMQP has not, is written as int64).
var numberTypes = typesByName(int8(0), uint8(0), int16(0), uint16(0), int32(0), uint32(0), int64(0), float32(0), float64(0))

func typesByName(vs ...any) map[string]reflect.Type {
	types := make(map[string]reflect.Type, len(vs))
	for _, v := range vs {
		t := reflect.TypeOf(v)
		types[t.String()] = t
	}
	return types
}

// untyped reads one [type, value] pair back into the Go type the AMQP
// client uses for that field type.
func untyped(tv [2]json.RawMessage) (any, error) {
	var typ string
	if err := json.Unmarshal(tv[0], &typ); err != nil {
		return nil, err
	}
	raw := tv[1]
	if t, ok := numberTypes[typ]; ok {
		p := reflect.New(t)
		err := json.Unmarshal(raw, p.Interface())
		return p.Elem().Interface(), err
	}
	switch typ {
	case "null":
		return nil, nil
	case "string":
		var s string
		return s, json.Unmarshal(raw, &s)
	case "string64", "bytes":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if typ == "string64" {
			return string(b), err
		}
		return b, err
	case "bool":
		var b bool
		return b, json.Unmarshal(raw, &b)
	case "decimal":
		var pair [2]json.RawMessage
		var d amqp.Decimal
		if err := json.Unmarshal(raw, &pair); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(pair[0], &d.Scale); err != nil {
			return nil, err
		}
		return d, json.Unmarshal(pair[1], &d.Value)
	case "time":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return time.Parse(time.RFC3339Nano, s)
	case "array":
		var arr [][2]json.RawMessage
		if err := json.Unmarshal(raw, &arr); err != nil {
			return nil, err
		}
		out := make([]any, len(arr))
		for i, e := range arr {
			v, err := untyped(e)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case "table":
		var t map[string][2]json.RawMessage
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, err
		}
		return decodeTable(t)
	}
	return nil, fmt.Errorf("unknown type %q", typ)
}

// ContextFromHeaders derives the handler's context from a message's headers (see
// WithContextFromHeaders).
type ContextFromHeaders func(ctx context.Context, headers amqp.Table) context.Context

// WithContextFromHeaders adds f to what builds each handler's context from the
// message's headers, after the inbox's own W3C trace context
// (SpanContextFromContext). pkg/inbox/otelinbox uses it to hand the headers to an
// OpenTelemetry propagator.
func WithContextFromHeaders(f ContextFromHeaders) Option {
	return func(o *options) { o.fromHeaders = append(o.fromHeaders, f) }
}

// handlerContext is ctx with the message's trace context: the W3C traceparent and
// tracestate headers, when valid, then each ContextFromHeaders option.
func (in *Inbox) handlerContext(ctx context.Context, m Message) context.Context {
	if sc, ok := TraceContext(m.Headers); ok {
		ctx = tracecontext.NewContext(ctx, sc.internal())
	}
	for _, f := range in.fromHeaders {
		ctx = f(ctx, m.Headers)
	}
	return ctx
}

// TraceContext parses the W3C traceparent and tracestate headers; ok is false when
// there is no valid traceparent (an invalid tracestate is left out).
func TraceContext(h amqp.Table) (SpanContext, bool) {
	tp := HeaderString(h, tracecontext.TraceparentHeader)
	if tp == "" {
		return SpanContext{}, false
	}
	sc, _, err := tracecontext.Parse(tp, HeaderString(h, tracecontext.TracestateHeader))
	if err != nil {
		return SpanContext{}, false
	}
	return spanContextOf(sc), true
}

// HeaderString returns a header's value when it is text (a string, or bytes as some
// clients send text), "" otherwise.
func HeaderString(h amqp.Table, key string) string {
	switch v := h[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

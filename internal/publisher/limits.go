package publisher

import (
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// shortstrMax is the AMQP 0-9-1 short string limit. amqp091-go refuses
// longer values (older versions wrote the length as uint8(len) and sent a
// truncated name); either way the message cannot go out as it is, so it
// fails here, by name, before it reaches the channel.
const shortstrMax = 255

// frameOverhead is a frame's type, channel, size and end octets.
const frameOverhead = 1 + 2 + 4 + 1

// checkLimits fails a message that the protocol or the broker cannot take:
// a short string over 255 bytes, a content header frame over frame_max (the
// broker closes the connection on one), a body over maxBody. Nothing is
// ever truncated. Header values are not short strings: amqp091-go writes a
// string value as a long string ('S'), so only their total size counts,
// through the content header.
func checkLimits(exchange, key string, pub *amqp.Publishing, frameMax, maxBody int) error {
	fields := [...]struct{ name, v string }{
		{"exchange", exchange}, {"routing key", key},
		{"content type", pub.ContentType}, {"content encoding", pub.ContentEncoding},
		{"correlation id", pub.CorrelationId}, {"reply-to", pub.ReplyTo},
		{"expiration", pub.Expiration}, {"message id", pub.MessageId},
		{"type", pub.Type}, {"user id", pub.UserId}, {"app id", pub.AppId},
	}
	for _, f := range fields {
		if len(f.v) > shortstrMax {
			return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrFieldTooLong, f.name, len(f.v), shortstrMax)
		}
	}
	if len(pub.Body) > maxBody {
		return fmt.Errorf("%w: body is %d bytes, the limit is %d", ErrTooLarge, len(pub.Body), maxBody)
	}
	if err := pub.Headers.Validate(); err != nil {
		return fmt.Errorf("%w: headers: %v", ErrRefused, err)
	}
	if err := checkBrokerRules(pub); err != nil {
		return err
	}
	hs, err := tableSize(pub.Headers, "headers")
	if err != nil {
		return err
	}
	size := frameOverhead + headerFrameFixed(pub) + hs
	if frameMax > 0 && size > frameMax {
		return fmt.Errorf("%w: content header is %d bytes (headers %d), the negotiated frame_max is %d",
			ErrFieldTooLong, size, hs, frameMax)
	}
	return nil
}

// headerFrameFixed is the content header payload without the headers
// table, encoded as amqp091-go does: class, weight, body size, flags, then
// each property that is set.
func headerFrameFixed(p *amqp.Publishing) int {
	n := 2 + 2 + 8 + 2
	for _, s := range [...]string{p.ContentType, p.ContentEncoding, p.CorrelationId, p.ReplyTo,
		p.Expiration, p.MessageId, p.Type, p.UserId, p.AppId} {
		if s != "" {
			n += 1 + len(s)
		}
	}
	if p.DeliveryMode > 0 {
		n++
	}
	if p.Priority > 0 {
		n++
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	return n
}

// tableSize is the encoded size of a field table (zero when empty, as
// amqp091-go then leaves the property out), failing on a field name over
// 255 bytes anywhere in it.
func tableSize(t amqp.Table, path string) (int, error) {
	if len(t) == 0 && path == "headers" {
		return 0, nil
	}
	n := 4
	for k, v := range t {
		if len(k) > shortstrMax {
			return 0, fmt.Errorf("%w: header name in %s is %d bytes, the limit is %d", ErrFieldTooLong, path, len(k), shortstrMax)
		}
		fs, err := fieldSize(v, path+"."+k)
		if err != nil {
			return 0, err
		}
		n += 1 + len(k) + fs
	}
	return n, nil
}

// fieldSize mirrors amqp091-go's writeField.
func fieldSize(v any, path string) (int, error) {
	switch v := v.(type) {
	case bool, byte, int8:
		return 2, nil
	case int16, uint16:
		return 3, nil
	case int, int32, uint32, float32:
		return 5, nil
	case int64, float64, time.Time:
		return 9, nil
	case amqp.Decimal:
		return 6, nil
	case string:
		return 5 + len(v), nil
	case []byte:
		return 5 + len(v), nil
	case nil:
		return 1, nil
	case []any:
		n := 5
		for _, x := range v {
			s, err := fieldSize(x, path)
			if err != nil {
				return 0, err
			}
			n += s
		}
		return n, nil
	case amqp.Table:
		s, err := tableSize(v, path)
		return 1 + s, err
	}
	return 0, fmt.Errorf("%w: header %s has type %T, which AMQP cannot carry", ErrRefused, path, v)
}

// maxExpiry is the largest per-message TTL RabbitMQ takes (MAX_EXPIRY_TIMER,
// milliseconds).
const maxExpiry = 1<<32 - 1

// checkBrokerRules fails a message RabbitMQ would refuse with 406
// PRECONDITION_FAILED on basic.publish, which closes the channel and takes
// every publish behind it along: sender-selected distribution headers CC
// and BCC that are not arrays (and array elements that are not strings,
// which the broker would silently ignore, losing the route), and an
// expiration that is not a whole number of milliseconds from 0 to 2^32-1.
// The failure wraps ErrRefused, the kind a broker's 406 has; the message
// is never sent.
func checkBrokerRules(pub *amqp.Publishing) error {
	for _, name := range [...]string{"CC", "BCC"} {
		v, ok := pub.Headers[name]
		if !ok {
			continue
		}
		arr, isArr := v.([]any)
		if !isArr {
			return fmt.Errorf("%w: header %s is %T, RabbitMQ takes only an array of strings there "+
				"(it would close the channel with 406 PRECONDITION_FAILED); not sent", ErrRefused, name, v)
		}
		for i, x := range arr {
			if _, isStr := x.(string); !isStr {
				return fmt.Errorf("%w: header %s element %d is %T, not a string (RabbitMQ would ignore that route); not sent",
					ErrRefused, name, i, x)
			}
		}
	}
	if e := pub.Expiration; e != "" {
		n, err := strconv.ParseUint(e, 10, 64)
		if err != nil || e[0] == '+' || n > maxExpiry {
			return fmt.Errorf("%w: expiration %q is not a whole number of milliseconds from 0 to %d "+
				"(RabbitMQ would close the channel with 406 PRECONDITION_FAILED); not sent", ErrRefused, e, uint64(maxExpiry))
		}
	}
	return nil
}

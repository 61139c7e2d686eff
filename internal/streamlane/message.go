package streamlane

import (
	"sort"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"

	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// RoutingKeyProperty is the application property that carries the
// message's routing key: a stream has no exchange and no routing, so the
// key travels with the message for consumers that filter on it.
const RoutingKeyProperty = "routing_key"

// encoded is a stream message marshalled once: its size is checked
// against the frame before it is sent, and the client's send marshals it
// again through MarshalBinary, which here returns the same bytes.
type encoded struct {
	*amqp.AMQP10
	bytes []byte
}

func (e encoded) MarshalBinary() ([]byte, error) { return e.bytes, nil }

// toStream maps a routed AMQP 0-9-1 message to an AMQP 1.0 message of
// the stream: the body as one data section, message id, content type and
// encoding, correlation id and timestamp as properties, and the headers
// the AMQP 1.0 application properties can hold (simple values only, no
// tables or lists) as application properties, with the routing key. It
// returns the names of the headers left out, sorted.
func toStream(m *router.Message, publishingID int64) (*amqp.AMQP10, []string) {
	p := &m.Publishing
	msg := amqp.NewMessage(p.Body)
	props := &amqp.MessageProperties{
		ContentType:     p.ContentType,
		ContentEncoding: p.ContentEncoding,
		CreationTime:    p.Timestamp,
	}
	if p.MessageId != "" {
		props.MessageID = p.MessageId
	}
	if p.CorrelationId != "" {
		props.CorrelationID = p.CorrelationId
	}
	msg.Properties = props
	app := make(map[string]any, len(p.Headers)+1)
	var skipped []string
	for k, v := range p.Headers {
		if sv, ok := simpleValue(v); ok {
			app[k] = sv
		} else {
			skipped = append(skipped, k)
		}
	}
	app[RoutingKeyProperty] = m.RoutingKey
	msg.ApplicationProperties = app
	msg.SetPublishingId(publishingID)
	sort.Strings(skipped)
	return msg, skipped
}

// simpleValue is an AMQP 0-9-1 header value as an application property:
// strings, booleans, times and bytes as they are, every integer as a long
// and every float as a double, so a consumer sees one type per kind
// whatever width the row's column had.
func simpleValue(v any) (any, bool) {
	switch t := v.(type) {
	case string, bool, time.Time, []byte:
		return t, true
	case int:
		return int64(t), true
	case int8:
		return int64(t), true
	case int16:
		return int64(t), true
	case int32:
		return int64(t), true
	case int64:
		return t, true
	case uint8:
		return int64(t), true
	case uint16:
		return int64(t), true
	case uint32:
		return int64(t), true
	case float32:
		return float64(t), true
	case float64:
		return t, true
	}
	return nil, false
}

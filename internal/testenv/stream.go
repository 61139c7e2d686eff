package testenv

import (
	"context"

	"fmt"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

// StreamPort is the stream port of the flavour's broker (scripts/stack.sh):
// RabbitMQ 3.10 on 5552, RabbitMQ 4.3 on 5553.
func StreamPort() int {
	if Current.AMQPPort == 5672 {
		return 5552
	}
	return 5553
}

// StreamAddr is the flavour's stream port on loopback.
func StreamAddr() string { return fmt.Sprintf("127.0.0.1:%d", StreamPort()) }

// StreamURI is the stream URI of the stack's guest user at addr.
func StreamURI(addr string) string { return "rabbitmq-stream://guest:guest@" + addr + "/" }

// StreamEnv is a stream client environment of the test's own, closed when
// the test ends.
func StreamEnv(t testing.TB) *stream.Environment {
	t.Helper()
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri(StreamURI(StreamAddr())).
		SetAddressResolver(stream.AddressResolver{Host: "127.0.0.1", Port: StreamPort()}))
	if err != nil {
		t.Fatalf("stream environment on %s: %v", StreamAddr(), err)
	}
	t.Cleanup(func() { _ = env.Close() })
	return env
}

// DeleteStream deletes a test's stream, if it exists.
func DeleteStream(t testing.TB, name string) {
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri(StreamURI(StreamAddr())).
		SetAddressResolver(stream.AddressResolver{Host: "127.0.0.1", Port: StreamPort()}))
	if err != nil {
		t.Logf("deleting stream %s: %v", name, err)
		return
	}
	defer func() { _ = env.Close() }()
	if err := env.DeleteStream(name); err != nil && err != stream.StreamDoesNotExist {
		t.Logf("deleting stream %s: %v", name, err)
	}
}

// StreamMessage is what a consumer read of one message.
type StreamMessage struct {
	ID, Body, ContentType string
	Created               time.Time
	Props                 map[string]any
}

// ReadStream consumes the stream from its first offset up to a sentinel
// that an unnamed producer of the test publishes last: everything stored
// before it has been read then, so counting needs no wait for messages that
// might still come.
func ReadStream(t testing.TB, name string, d time.Duration) []StreamMessage {
	t.Helper()
	env := StreamEnv(t)
	p, err := env.NewProducer(name, nil)
	if err != nil {
		t.Fatalf("sentinel producer: %v", err)
	}
	sentinel := amqp.NewMessage([]byte("sentinel"))
	sentinel.Properties = &amqp.MessageProperties{MessageID: "sentinel"}
	confirmed := p.NotifyPublishConfirmation()
	if err := p.Send(sentinel); err != nil {
		t.Fatalf("sentinel: %v", err)
	}
	select {
	case sts := <-confirmed:
		if len(sts) != 1 || !sts[0].IsConfirmed() {
			t.Fatalf("sentinel not confirmed: %v", sts[0].GetError())
		}
	case <-time.After(d):
		t.Fatalf("sentinel not confirmed within %s", d)
	}
	_ = p.Close()

	var mu sync.Mutex
	var got []StreamMessage
	end := make(chan struct{})
	var once sync.Once
	c, err := env.NewConsumer(name, func(_ stream.ConsumerContext, m *amqp.Message) {
		r := StreamMessage{Props: m.ApplicationProperties}
		if m.Properties != nil {
			r.ID, _ = m.Properties.MessageID.(string)
			r.ContentType = m.Properties.ContentType
			r.Created = m.Properties.CreationTime
		}
		if len(m.Data) > 0 {
			r.Body = string(m.Data[0])
		}
		if r.ID == "sentinel" {
			once.Do(func() { close(end) })
			return
		}
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer func() { _ = c.Close() }()
	select {
	case <-end:
	case <-time.After(d):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("consumer did not reach the sentinel within %s (%d read)", d, len(got))
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]StreamMessage(nil), got...)
}

// ReadStreamIDs reads the message ids a stream holds, from its first
// offset, over AMQP 0-9-1 as a RabbitMQ consumer of a stream queue does
// (basic.consume with x-stream-offset, a prefetch, acks), up to a sentinel
// the test publishes last. Faster than the stream protocol's consumer for
// a count of a large stream.
func ReadStreamIDs(t testing.TB, name string, d time.Duration) []string {
	t.Helper()
	_, ch := Dial(t)
	if err := ch.PublishWithContext(context.Background(), "", name, false, false,
		amqp091.Publishing{MessageId: "sentinel", Body: []byte("sentinel")}); err != nil {
		t.Fatalf("sentinel: %v", err)
	}
	if err := ch.Qos(5000, 0, false); err != nil {
		t.Fatalf("qos: %v", err)
	}
	deliveries, err := ch.Consume(name, "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatalf("consuming stream %s: %v", name, err)
	}
	var ids []string
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-deliveries:
			if !ok {
				t.Fatalf("stream %s: the consumer was closed after %d messages", name, len(ids))
			}
			if m.MessageId == "sentinel" {
				_ = m.Ack(true)
				return ids
			}
			ids = append(ids, m.MessageId)
			if len(ids)%1000 == 0 {
				_ = m.Ack(true)
			}
		case <-timer.C:
			t.Fatalf("stream %s: no sentinel within %s (%d read)", name, d, len(ids))
		}
	}
}

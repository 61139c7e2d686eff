package testenv

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Broker is a test's own exchange with a queue bound to it (routing key #).
type Broker struct {
	Exchange string
	Queue    string
	conn     *amqp.Connection
	ch       *amqp.Channel
}

// NewBroker declares a topic exchange and a queue bound with "#", deleted
// when the test ends.
func NewBroker(t testing.TB) *Broker {
	t.Helper()
	conn, ch := dial(t)
	b := &Broker{Exchange: UniqueName("ex"), Queue: UniqueName("q"), conn: conn, ch: ch}
	if err := ch.ExchangeDeclare(b.Exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("declaring exchange: %v", err)
	}
	b.DeclareQueue(t, b.Queue, "#")
	t.Cleanup(func() {
		_, _ = b.ch.QueueDelete(b.Queue, false, false, false)
		_ = b.ch.ExchangeDelete(b.Exchange, false, false)
		_ = b.conn.Close()
	})
	return b
}

// DeclareQueue declares another queue bound to the exchange.
func (b *Broker) DeclareQueue(t testing.TB, name, key string) {
	t.Helper()
	if _, err := b.ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatalf("declaring queue: %v", err)
	}
	if err := b.ch.QueueBind(name, key, b.Exchange, false, nil); err != nil {
		t.Fatalf("binding queue: %v", err)
	}
}

// Delivery is what a test keeps of a message.
type Delivery struct {
	MessageID  string
	RoutingKey string
	Exchange   string
	Body       []byte
	Headers    amqp.Table
	// Timestamp is the message's timestamp property (whole seconds).
	Timestamp time.Time
	// The other AMQP properties a publisher sets.
	ContentType, ContentEncoding, AppID, Type, CorrelationID, UserID, Expiration string
	DeliveryMode, Priority                                                       uint8
	At                                                                           time.Time
}

// Collector consumes a queue and records every delivery in arrival order.
type Collector struct {
	mu   sync.Mutex
	msgs []Delivery
}

// Consume starts collecting the queue's messages until the test ends.
func (b *Broker) Consume(t testing.TB, queue string) *Collector {
	t.Helper()
	conn, ch := dial(t)
	if err := ch.Qos(2000, 0, false); err != nil {
		t.Fatalf("qos: %v", err)
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("consuming %s: %v", queue, err)
	}
	c := &Collector{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range deliveries {
			c.mu.Lock()
			c.msgs = append(c.msgs, Delivery{MessageID: d.MessageId, RoutingKey: d.RoutingKey, Exchange: d.Exchange,
				Body: d.Body, Headers: d.Headers, Timestamp: d.Timestamp, ContentType: d.ContentType,
				ContentEncoding: d.ContentEncoding, AppID: d.AppId, Type: d.Type, CorrelationID: d.CorrelationId,
				UserID: d.UserId, Expiration: d.Expiration, DeliveryMode: d.DeliveryMode, Priority: d.Priority, At: time.Now()})
			c.mu.Unlock()
			_ = d.Ack(false)
		}
	}()
	t.Cleanup(func() { _ = conn.Close(); <-done })
	return c
}

// Len is the number of deliveries so far.
func (c *Collector) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

// All returns a copy of the deliveries so far.
func (c *Collector) All() []Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Delivery(nil), c.msgs...)
}

// Distinct counts distinct message ids and duplicates.
func (c *Collector) Distinct() (distinct, duplicates int) {
	seen := map[string]bool{}
	for _, d := range c.All() {
		if seen[d.MessageID] {
			duplicates++
			continue
		}
		seen[d.MessageID] = true
	}
	return len(seen), duplicates
}

// barrierPrefix starts the message id of Barrier's markers.
const barrierPrefix = "test-barrier-"

// Barrier publishes a marker message to the broker's exchange (routing key
// test.barrier) and waits until c receives it; it returns what c received
// before it, every marker left out. A queue hands its messages on in the
// order it took them, and a publisher confirm says the queue took the
// message: once the marker is in, every message confirmed before Barrier
// was called is in too, so a test can assert that nothing more came (no
// duplicate arriving last) without waiting for a quiet period. c must
// consume a queue bound to the exchange with a key that takes the marker
// (NewBroker's queue, bound with #).
func (b *Broker) Barrier(t testing.TB, c *Collector, within time.Duration) []Delivery {
	t.Helper()
	id := barrierPrefix + UniqueName("m")
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := b.ch.PublishWithContext(ctx, b.Exchange, "test.barrier", true, false, amqp.Publishing{MessageId: id}); err != nil {
		t.Fatalf("publishing the barrier: %v", err)
	}
	var before []Delivery
	WaitFor(t, within, "the barrier message", func() (bool, string) {
		all := c.All()
		for i, d := range all {
			if d.MessageID == id {
				before = all[:i]
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d messages arrived, not the barrier", len(all))
	})
	return slices.DeleteFunc(before, func(d Delivery) bool { return strings.HasPrefix(d.MessageID, barrierPrefix) })
}

// NewExchange declares a topic exchange with no queue bound to it (so every
// message to it is unroutable), deleted when the test ends.
func NewExchange(t testing.TB) string {
	t.Helper()
	conn, ch := dial(t)
	name := UniqueName("ex_unbound")
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("declaring exchange: %v", err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(name, false, false); _ = conn.Close() })
	return name
}

// DeclareBoundExchange declares a topic exchange named name with the
// broker's queue bound to it with "#", deleted when the test ends.
func (b *Broker) DeclareBoundExchange(t testing.TB, name string) {
	t.Helper()
	if err := b.ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("declaring exchange %s: %v", name, err)
	}
	t.Cleanup(func() { _ = b.ch.ExchangeDelete(name, false, false) })
	b.BindQueueTo(t, b.Queue, name)
}

// BindQueueTo binds a queue to another exchange with "#".
func (b *Broker) BindQueueTo(t testing.TB, queue, exchange string) {
	t.Helper()
	if err := b.ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		t.Fatalf("binding %s to %s: %v", queue, exchange, err)
	}
}

// dial opens a connection and a channel to the stack's RabbitMQ.
func dial(t testing.TB) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(AMQPURL)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable (run scripts/stack.sh up): %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("opening channel: %v", err)
	}
	return conn, ch
}

// Dial opens a connection and a channel to the stack's RabbitMQ, closed
// when the test ends.
func Dial(t testing.TB) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, ch := dial(t)
	t.Cleanup(func() { _ = conn.Close() })
	return conn, ch
}

// ConnKiller dials the broker (as amqp.Config.Dial) and can cut every
// connection it made, as a broker crash would.
type ConnKiller struct {
	mu    sync.Mutex
	conns []net.Conn
	dials int
}

// Dial is an amqp.Config.Dial that remembers the connection.
func (k *ConnKiller) Dial(network, addr string) (net.Conn, error) {
	c, err := amqp.DefaultDial(5*time.Second)(network, addr)
	if err == nil {
		k.mu.Lock()
		k.conns, k.dials = append(k.conns, c), k.dials+1
		k.mu.Unlock()
	}
	return c, err
}

// KillAll closes every connection dialled so far.
func (k *ConnKiller) KillAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

// Dials is how many connections were dialled.
func (k *ConnKiller) Dials() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dials
}

// QueueDepth is the number of ready messages in queue (unACKed ones return
// to ready when their consumer's connection closes).
func QueueDepth(t testing.TB, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspecting queue %s: %v", queue, err)
	}
	return q.Messages
}

// NewCollectedBroker is NewBroker with a Collector already consuming its
// queue: how most relay tests begin.
func NewCollectedBroker(t testing.TB) (*Broker, *Collector) {
	t.Helper()
	b := NewBroker(t)
	return b, b.Consume(t, b.Queue)
}

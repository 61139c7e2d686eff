package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	streamamqp "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// markerPrefix starts the message ids of the test's own markers (barriers,
// stream sentinels), which the history leaves out.
const markerPrefix = "chaos-marker-"

// queueConsumer reads the schedule's queue straight from the broker (never
// through the relays' proxies), records every delivery and acks it. When
// its connection drops (a cluster node stopped) it dials the next node;
// the broker then redelivers what was not acked, flagged redelivered.
type queueConsumer struct {
	e       *env
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	markers map[string]bool
}

func startQueueConsumer(e *env) *queueConsumer {
	c := &queueConsumer{e: e, stop: make(chan struct{}), done: make(chan struct{}), markers: map[string]bool{}}
	go c.run()
	e.t.Cleanup(c.halt)
	return c
}

func (c *queueConsumer) halt() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

func (c *queueConsumer) run() {
	defer close(c.done)
	for i := 0; ; i++ {
		url := c.e.brokerURLs[i%len(c.e.brokerURLs)]
		err := c.consume(url)
		select {
		case <-c.stop:
			return
		case <-time.After(200 * time.Millisecond): // the next node, after a pause
		}
		if err != nil {
			c.e.note("queue consumer: %v; dialling again", err)
		}
	}
}

// consume reads the queue on one node until its connection ends or the
// consumer stops.
func (c *queueConsumer) consume(url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Heartbeat: 5 * time.Second, Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(c.e.queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-c.stop:
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("the delivery channel of %s closed", strings.SplitN(url, "@", 2)[1])
			}
			if strings.HasPrefix(d.MessageId, markerPrefix) {
				c.mu.Lock()
				c.markers[d.MessageId] = true
				c.mu.Unlock()
			} else {
				c.e.rec.deliver(Delivery{Src: "queue", ID: d.MessageId, Body: string(d.Body), At: time.Now(), Redelivered: d.Redelivered})
			}
			_ = d.Ack(false)
		}
	}
}

// barrier publishes a marker into the exchange and waits until the
// consumer read it: a queue hands messages on in the order it took them,
// so everything confirmed into the queue before was read by then.
func (c *queueConsumer) barrier(within time.Duration) error {
	id := markerPrefix + testenv.UniqueName("b")
	deadline := time.Now().Add(within)
	for i := 0; ; i++ {
		err := publishMarker(c.e.brokerURLs[i%len(c.e.brokerURLs)], c.e.exchange, id)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("publishing the barrier: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		c.mu.Lock()
		ok := c.markers[id]
		c.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the queue consumer did not read the barrier within %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publishMarker publishes one confirmed marker message.
func publishMarker(url, exchange, id string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "chaos.marker", true, false, amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent})
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("marker %s nacked", id)
	}
	return nil
}

// streamConsumer reads the schedule's stream from its first offset,
// straight from the broker.
type streamConsumer struct {
	e       *env
	env     *stream.Environment
	c       *stream.Consumer
	mu      sync.Mutex
	markers map[string]bool
}

func startStreamConsumer(e *env) *streamConsumer {
	s := &streamConsumer{e: e, env: testenv.StreamEnv(e.t), markers: map[string]bool{}}
	c, err := s.env.NewConsumer(e.streamName, func(_ stream.ConsumerContext, m *streamamqp.Message) {
		var id string
		if m.Properties != nil {
			id = fmt.Sprint(m.Properties.MessageID)
		}
		var body string
		if len(m.Data) > 0 {
			body = string(m.Data[0])
		}
		if strings.HasPrefix(id, markerPrefix) {
			s.mu.Lock()
			s.markers[id] = true
			s.mu.Unlock()
			return
		}
		e.rec.deliver(Delivery{Src: "stream", ID: id, Body: body, At: time.Now()})
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		e.t.Fatalf("stream consumer on %s: %v", e.streamName, err)
	}
	s.c = c
	e.t.Cleanup(func() { _ = c.Close() })
	return s
}

// barrier is the queue's for the stream: a sentinel a producer of the
// test's own publishes last, read once everything stored before it was.
func (s *streamConsumer) barrier(within time.Duration) error {
	id := markerPrefix + testenv.UniqueName("s")
	p, err := s.env.NewProducer(s.e.streamName, nil)
	if err != nil {
		return fmt.Errorf("sentinel producer: %w", err)
	}
	defer p.Close()
	m := streamamqp.NewMessage([]byte("sentinel"))
	m.Properties = &streamamqp.MessageProperties{MessageID: id}
	confirmed := p.NotifyPublishConfirmation()
	if err := p.Send(m); err != nil {
		return fmt.Errorf("sentinel: %w", err)
	}
	select {
	case sts := <-confirmed:
		if len(sts) != 1 || !sts[0].IsConfirmed() {
			return fmt.Errorf("sentinel not confirmed")
		}
	case <-time.After(within):
		return fmt.Errorf("sentinel not confirmed within %s", within)
	}
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		ok := s.markers[id]
		s.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the stream consumer did not read the sentinel within %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

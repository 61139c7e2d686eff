// Package streamlanetest is a scripted stream broker behind
// streamlane.Producer, so the stream lane's state machine runs in unit tests
// (and the relay's property tests) without RabbitMQ. It keeps what a real
// stream keeps for deduplication: the messages stored in order and the
// last publishing id stored per producer name; a message at or below that
// id is dropped and confirmed, as RabbitMQ does. The test decides when and
// how each message sent is answered.
package streamlanetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/binlog-relay/binlog-relay/internal/streamlane"
)

// Stored is one message on the stream.
type Stored struct {
	Producer  string
	ID        int64
	MessageID string
}

// Broker is one fake stream.
type Broker struct {
	mu      sync.Mutex
	last    map[string]int64
	stored  []Stored
	open    map[string]*Producer
	dialErr error
	dropped int // messages dropped as duplicates
	dialled int
	sends   []Sent
}

// Sent is one message written by a producer (every attempt).
type Sent struct {
	Producer  string
	Dial      int // which dial's producer wrote it (1-based)
	ID        int64
	MessageID string
}

// NewBroker is an empty stream.
func NewBroker() *Broker {
	return &Broker{last: map[string]int64{}, open: map[string]*Producer{}}
}

// ErrDial is the error of a dial the test refused (RefuseDials).
var ErrDial = errors.New("fake stream broker: connection refused")

// RefuseDials makes the next dials fail (nil lets them through).
func (b *Broker) RefuseDials(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dialErr = err
}

// Dial opens a producer named name for each Run.
func (b *Broker) Dial(name string) streamlane.Dial {
	return func(ctx context.Context) (streamlane.Producer, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.dialErr != nil {
			return nil, b.dialErr
		}
		if old := b.open[name]; old != nil && !old.isClosed() {
			return nil, fmt.Errorf("fake stream broker: producer %s is open already", name)
		}
		b.dialled++
		p := &Producer{b: b, name: name, dial: b.dialled, confirms: make(chan []streamlane.Confirm, 1<<12),
			closed: make(chan stream.Event, 1)}
		b.open[name] = p
		return p, nil
	}
}

// Producer is the open producer of name, or nil.
func (b *Broker) Producer(name string) *Producer {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.open[name]
	if p == nil || p.isClosed() {
		return nil
	}
	return p
}

// Stored returns the messages stored, in order.
func (b *Broker) Stored() []Stored {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.stored)
}

// Sends returns every message written, in order.
func (b *Broker) Sends() []Sent {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sends)
}

// LastID is the last publishing id stored for a producer name.
func (b *Broker) LastID(name string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last[name]
}

// Dropped counts the messages dropped as duplicates.
func (b *Broker) Dropped() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// store stores one message unless its id is at or below the producer's
// last (a duplicate, dropped). Called with b.mu held.
func (b *Broker) store(name string, m sent) {
	if m.id <= b.last[name] {
		b.dropped++
		return
	}
	b.last[name] = m.id
	b.stored = append(b.stored, Stored{Producer: name, ID: m.id, MessageID: m.messageID})
}

// sent is a message written and not answered yet.
type sent struct {
	id        int64
	messageID string
	stored    bool // stored already, its confirm not sent
}

// Producer is one Run's producer. Messages sent wait, unanswered, until the
// test answers them.
type Producer struct {
	b        *Broker
	name     string
	dial     int
	confirms chan []streamlane.Confirm
	closed   chan stream.Event
	// Under b.mu:
	pending  []sent
	sendErr  error
	shut     bool
	shutOnce sync.Once
}

var _ streamlane.Producer = (*Producer)(nil)

func (p *Producer) isClosed() bool { return p.shut }

// Send takes a batch: each message waits for the test's answer.
func (p *Producer) Send(batch []message.StreamMessage) error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if p.shut {
		return errors.New("fake stream broker: producer closed")
	}
	if p.sendErr != nil {
		return p.sendErr
	}
	for _, m := range batch {
		s := sent{id: m.GetPublishingId()}
		if props := m.GetMessageProperties(); props != nil {
			s.messageID = fmt.Sprint(props.MessageID)
		}
		p.pending = append(p.pending, s)
		p.b.sends = append(p.b.sends, Sent{Producer: p.name, Dial: p.dial, ID: s.id, MessageID: s.messageID})
	}
	return nil
}

func (p *Producer) Confirms() <-chan []streamlane.Confirm { return p.confirms }
func (p *Producer) Closed() <-chan stream.Event           { return p.closed }
func (p *Producer) Broker() string                        { return "fake" }

// Close closes the producer (the lane's own close at the end of a Run).
func (p *Producer) Close(context.Context) {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	p.closeLocked()
}

func (p *Producer) closeLocked() {
	p.shutOnce.Do(func() {
		p.shut = true
		close(p.confirms)
	})
}

// Pending counts the messages sent and not answered.
func (p *Producer) Pending() int {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	return len(p.pending)
}

// Confirm stores and confirms the first n messages waiting (all when n is
// more), in one batch of confirms; reversed, the batch lists them last
// first (the client's confirms come per frame, in any order within it).
func (p *Producer) Confirm(n int, reversed bool) {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if p.shut {
		return
	}
	n = min(n, len(p.pending))
	if n == 0 {
		return
	}
	batch := make([]streamlane.Confirm, n)
	for i, m := range p.pending[:n] {
		if !m.stored {
			p.b.store(p.name, m)
		}
		batch[i] = streamlane.Confirm{ID: m.id}
	}
	p.pending = p.pending[n:]
	if reversed {
		slices.Reverse(batch)
	}
	p.confirms <- batch
}

// ErrPublish is the broker's refusal of a publish (Refuse).
var ErrPublish = errors.New("fake stream broker: publish refused")

// Refuse answers the first message waiting and every one behind it with a
// publish error: RabbitMQ refuses per producer, not per message, so
// nothing behind a refused message is stored.
func (p *Producer) Refuse() {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if p.shut || len(p.pending) == 0 {
		return
	}
	batch := make([]streamlane.Confirm, 0, len(p.pending))
	for _, m := range p.pending {
		if m.stored {
			batch = append(batch, streamlane.Confirm{ID: m.id})
			continue
		}
		batch = append(batch, streamlane.Confirm{ID: m.id, Err: ErrPublish})
	}
	p.pending = nil
	p.confirms <- batch
}

// StoreSilently stores the first n messages waiting without confirming them
// (a confirm lost with the connection).
func (p *Producer) StoreSilently(n int) {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	for i := range p.pending[:min(n, len(p.pending))] {
		if !p.pending[i].stored {
			p.b.store(p.name, p.pending[i])
			p.pending[i].stored = true
		}
	}
}

// FailSends makes every later Send fail with err (a write on a dead
// socket).
func (p *Producer) FailSends(err error) {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	p.sendErr = err
}

// Cut closes the producer under the lane (the connection lost): the
// messages waiting are never answered; StoreSilently before it decides
// which of them the stream kept.
func (p *Producer) Cut(reason string) {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if p.shut {
		return
	}
	p.pending = nil
	p.closed <- stream.Event{Reason: reason, Err: errors.New("fake stream broker: connection lost")}
	p.closeLocked()
}

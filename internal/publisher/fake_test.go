package publisher

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// fakeBroker is an in-process broker behind amqpConn/amqpChannel that
// follows amqp091-go's delivery contract (see broker.go) and can be
// scripted per publish: ack, nack, return, withhold the confirmation,
// close the channel or the connection with any reply code, slow confirms.
type fakeBroker struct {
	mu        sync.Mutex
	dials     int
	dialTimes []time.Time
	failDials int             // the next this many dials fail
	dialURLs  []string        // the URL of each dial, in order
	down      map[string]bool // nodes whose dials are refused
	frameMax  int
	exchanges map[string]bool // existing exchanges; "unroutable" ones have no binding
	unbound   map[string]bool
	declares  int // passive declares answered
	// script decides a publish's outcome; nil means the default: a
	// missing exchange closes the channel with 404, "amq.rabbitmq.trace"
	// with 403, an unbound exchange returns the message, else ack.
	script    func(p fakePub) outcome
	published []fakePub
	routed    []fakePub // publishes the broker routed to a queue, in order
	maxUnconf int       // the most confirmations outstanding on a channel
	chans     []*fakeChannel
	// acked holds the acks handed to the client, by channel and tag: a
	// message the broker routed is confirmed only once its ack is out.
	acked map[fakeTag]bool
}

// fakeTag names one publish: the channel (numbered from 1 across the
// broker) and its delivery tag there.
type fakeTag struct {
	ch  int
	seq uint64
}

type fakePub struct {
	conn     int // 1-based dial number
	ch       int // 1-based channel number, across connections
	seq      uint64
	exchange string
	key      string
	msg      amqp.Publishing
	attempt  int // publishes of this message id so far, this one included
}

type outcomeKind int

const (
	ack outcomeKind = iota
	nack
	ret
	withhold // routed; the confirmation waits for ackWithheld
	closeChannel
	closeConn
)

type outcome struct {
	kind  outcomeKind
	code  int
	text  string
	delay time.Duration // before the confirmation is delivered
	// ackUpTo first acks the withheld confirmations up to this tag, as
	// one multiple ack.
	ackUpTo uint64
}

func newFakeBroker() *fakeBroker {
	return &fakeBroker{frameMax: 131072, exchanges: map[string]bool{"amq.rabbitmq.trace": true}, unbound: map[string]bool{},
		acked: map[fakeTag]bool{}}
}

func (b *fakeBroker) dial(ctx context.Context, url string) (amqpConn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dials++
	b.dialTimes = append(b.dialTimes, time.Now())
	b.dialURLs = append(b.dialURLs, url)
	if b.failDials > 0 || b.down[url] {
		b.failDials = max(b.failDials-1, 0)
		return nil, errors.New("dial tcp 127.0.0.1:5672: connect: connection refused")
	}
	return &fakeConn{b: b, n: b.dials}, nil
}

func (b *fakeBroker) dialCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dials
}

func (b *fakeBroker) addExchange(name string, bound bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.exchanges[name] = true
	if !bound {
		b.unbound[name] = true
	}
}

func (b *fakeBroker) decide(p fakePub) outcome {
	if b.script != nil {
		if o, ok := b.scriptOutcome(p); ok {
			return o
		}
	}
	switch {
	case p.exchange == "amq.rabbitmq.trace":
		return outcome{kind: closeChannel, code: 403, text: "ACCESS_REFUSED - access to exchange 'amq.rabbitmq.trace' in vhost '/' refused for user 'guest'"}
	case strings.HasPrefix(p.exchange, "denied"):
		return outcome{kind: closeChannel, code: 403, text: "ACCESS_REFUSED - write access to exchange '" + p.exchange + "' in vhost '/' refused for user 'relay'"}
	case p.exchange != "" && !b.exchanges[p.exchange]:
		return outcome{kind: closeChannel, code: 404, text: "NOT_FOUND - no exchange '" + p.exchange + "' in vhost '/'"}
	case b.unbound[p.exchange]:
		return outcome{kind: ret}
	}
	if v, ok := p.msg.Headers["CC"]; ok {
		if _, isArray := v.([]any); !isArray {
			return outcome{kind: closeChannel, code: 406, text: "PRECONDITION_FAILED - invalid header 'CC'"}
		}
	}
	return outcome{kind: ack}
}

// scriptOutcome runs the script; a zero kind from a script that returns
// ack with code -1 means "default".
func (b *fakeBroker) scriptOutcome(p fakePub) (outcome, bool) {
	o := b.script(p)
	if o.code == -1 {
		return outcome{}, false
	}
	return o, true
}

func (b *fakeBroker) routedIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, len(b.routed))
	for i, p := range b.routed {
		ids[i] = p.msg.MessageId
	}
	return ids
}

// ackWithheld acks every withheld confirmation on every open channel, as
// one multiple ack.
func (b *fakeBroker) ackWithheld() {
	b.mu.Lock()
	chans := append([]*fakeChannel(nil), b.chans...)
	b.mu.Unlock()
	for _, c := range chans {
		c.mu.Lock()
		c.ackUpTo(c.seq)
		c.mu.Unlock()
	}
}

type fakeConn struct {
	b      *fakeBroker
	n      int
	mu     sync.Mutex
	closed bool
	chans  []*fakeChannel
}

func (c *fakeConn) Channel() (amqpChannel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, amqp.ErrClosed
	}
	ch := &fakeChannel{conn: c, b: c.b, wake: newWakeup(), stop: make(chan struct{})}
	c.chans = append(c.chans, ch)
	c.b.mu.Lock()
	c.b.chans = append(c.b.chans, ch)
	ch.id = len(c.b.chans)
	c.b.mu.Unlock()
	go ch.deliver()
	return ch, nil
}

func (c *fakeConn) FrameMax() int { return c.b.frameMax }

func (c *fakeConn) MaxMessageSize() int { return 128 << 20 }

func (c *fakeConn) IsClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *fakeConn) Close() error {
	c.shutdown(&amqp.Error{Code: 200, Reason: "closed by client"}, false)
	return nil
}

// shutdown marks the connection closed, then shuts its channels down with
// e (as amqp091-go does); a client close notifies nobody.
func (c *fakeConn) shutdown(e *amqp.Error, notify bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	chans := c.chans
	c.mu.Unlock()
	for _, ch := range chans {
		if notify {
			ch.shutdown(e)
		} else {
			ch.shutdown(nil)
		}
	}
}

type event struct {
	ret       *amqp.Return
	conf      *amqp.Confirmation
	delay     time.Duration
	closeCh   *amqp.Error
	closeConn *amqp.Error
}

type fakeChannel struct {
	b    *fakeBroker
	conn *fakeConn
	id   int // 1-based, across the broker

	mu         sync.Mutex
	closed     bool
	discarding bool // a close is on its way: the broker drops what follows
	seq        uint64
	unconf     int
	withheld   []uint64
	events     []event
	wake       wakeup
	stop       chan struct{}

	notifyM  sync.RWMutex
	confirms []chan amqp.Confirmation
	returns  []chan amqp.Return
	closes   []chan *amqp.Error
}

func (c *fakeChannel) queue(ev event) {
	c.events = append(c.events, ev)
	c.wake.notify()
}

// deliver hands events over in order from one goroutine, like amqp091-go's
// reader.
func (c *fakeChannel) deliver() {
	for c.wake.wait(c.stop) {
		for {
			c.mu.Lock()
			if len(c.events) == 0 || c.closed {
				c.mu.Unlock()
				break
			}
			ev := c.events[0]
			c.events = c.events[1:]
			c.mu.Unlock()
			c.apply(ev)
		}
	}
}

func (c *fakeChannel) apply(ev event) {
	switch {
	case ev.delay > 0:
		time.Sleep(ev.delay)
	case ev.closeCh != nil:
		c.shutdown(ev.closeCh)
	case ev.closeConn != nil:
		c.conn.shutdown(ev.closeConn, true)
	case ev.ret != nil:
		c.notifyM.RLock()
		for _, l := range c.returns {
			select {
			case l <- *ev.ret:
			case <-time.After(5 * time.Second):
			}
		}
		c.notifyM.RUnlock()
	case ev.conf != nil:
		c.mu.Lock()
		c.unconf--
		c.mu.Unlock()
		tag := fakeTag{c.id, ev.conf.DeliveryTag}
		c.notifyM.RLock()
		for _, l := range c.confirms {
			if ev.conf.Ack { // before the send: the client may act on it at once
				c.b.mu.Lock()
				c.b.acked[tag] = true
				c.b.mu.Unlock()
			}
			select {
			case l <- *ev.conf:
			case <-time.After(5 * time.Second): // amqp091-go's notifyTimeout
				c.b.mu.Lock()
				delete(c.b.acked, tag) // dropped: the client never saw it
				c.b.mu.Unlock()
			}
		}
		c.notifyM.RUnlock()
	}
}

func (c *fakeChannel) shutdown(e *amqp.Error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.events = nil
	close(c.stop)
	c.mu.Unlock()
	c.notifyM.Lock()
	defer c.notifyM.Unlock()
	if e != nil {
		for _, l := range c.closes {
			select {
			case l <- e:
			default:
			}
		}
	}
	for _, l := range c.closes {
		close(l)
	}
	for _, l := range c.returns {
		close(l)
	}
	for _, l := range c.confirms {
		close(l)
	}
	c.closes, c.returns, c.confirms = nil, nil, nil
}

// ackUpTo queues confirmations for the withheld tags up to tag. Called
// with c.mu held.
func (c *fakeChannel) ackUpTo(tag uint64) {
	keep := c.withheld[:0]
	for _, seq := range c.withheld {
		if seq <= tag {
			c.queue(event{conf: &amqp.Confirmation{DeliveryTag: seq, Ack: true}})
		} else {
			keep = append(keep, seq)
		}
	}
	c.withheld = keep
}

func (c *fakeChannel) Confirm(bool) error { return nil }

func (c *fakeChannel) GetNextPublishSeqNo() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq + 1
}

func (c *fakeChannel) PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error {
	if err := msg.Headers.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return amqp.ErrClosed
	}
	c.seq++
	if c.discarding {
		return nil
	}
	p := fakePub{conn: c.conn.n, ch: c.id, seq: c.seq, exchange: exchange, key: key, msg: msg}
	c.b.mu.Lock()
	p.attempt = 1
	for _, q := range c.b.published {
		if q.msg.MessageId == msg.MessageId {
			p.attempt++
		}
	}
	c.b.published = append(c.b.published, p)
	o := c.b.decide(p)
	if o.kind == ack || o.kind == withhold {
		c.b.routed = append(c.b.routed, p)
	}
	c.unconf++
	c.b.maxUnconf = max(c.b.maxUnconf, c.unconf)
	c.b.mu.Unlock()
	if o.ackUpTo > 0 {
		c.ackUpTo(o.ackUpTo)
	}
	if o.delay > 0 {
		c.queue(event{delay: o.delay})
	}
	switch o.kind {
	case ack, nack:
		c.queue(event{conf: &amqp.Confirmation{DeliveryTag: p.seq, Ack: o.kind == ack}})
	case ret:
		c.queue(event{ret: &amqp.Return{ReplyCode: 312, ReplyText: "NO_ROUTE", Exchange: exchange, RoutingKey: key,
			MessageId: msg.MessageId, Body: msg.Body, Headers: msg.Headers}})
		c.queue(event{conf: &amqp.Confirmation{DeliveryTag: p.seq, Ack: true}})
	case withhold:
		c.withheld = append(c.withheld, p.seq)
	case closeChannel:
		c.discarding = true
		c.queue(event{closeCh: &amqp.Error{Code: o.code, Reason: o.text, Server: true}})
	case closeConn:
		c.discarding = true
		c.queue(event{closeConn: &amqp.Error{Code: o.code, Reason: o.text, Server: o.code != 0}})
	}
	return nil
}

func (c *fakeChannel) NotifyPublish(l chan amqp.Confirmation) chan amqp.Confirmation {
	c.notifyM.Lock()
	defer c.notifyM.Unlock()
	c.confirms = append(c.confirms, l)
	return l
}

func (c *fakeChannel) NotifyReturn(l chan amqp.Return) chan amqp.Return {
	c.notifyM.Lock()
	defer c.notifyM.Unlock()
	c.returns = append(c.returns, l)
	return l
}

func (c *fakeChannel) NotifyClose(l chan *amqp.Error) chan *amqp.Error {
	c.notifyM.Lock()
	defer c.notifyM.Unlock()
	c.closes = append(c.closes, l)
	return l
}

func (c *fakeChannel) ExchangeDeclarePassive(name, kind string, durable, autoDelete, internal, noWait bool, args amqp.Table) error {
	c.b.mu.Lock()
	c.b.declares++
	exists := c.b.exchanges[name] || strings.HasPrefix(name, "amq.")
	c.b.mu.Unlock()
	if !exists {
		e := &amqp.Error{Code: 404, Reason: "NOT_FOUND - no exchange '" + name + "' in vhost '/'", Server: true}
		c.shutdown(e)
		return e
	}
	return nil
}

func (c *fakeChannel) IsClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *fakeChannel) Close() error {
	c.shutdown(nil)
	return nil
}

// Abort is a socket closed under the connection: amqp091-go's reader
// shuts it down with a frame error (not the broker's).
func (c *fakeConn) Abort() {
	c.shutdown(&amqp.Error{Code: amqp.FrameError, Reason: "read tcp: use of closed network connection"}, true)
}

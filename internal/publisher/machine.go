package publisher

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// entryState is where one job is in its life.
type entryState uint8

const (
	// waiting: not published on the current channel (new, or its fate on
	// a lost channel is unknown, or held for a retry).
	waiting entryState = iota
	// sent: published on the current channel, confirmation pending.
	sent
	// done: the outcome is known (err nil: confirmed and routed).
	done
)

type entry[T any] struct {
	job   Job[T]
	state entryState
	err   error
	seq   uint64
	// exchange and routing key of the last publish (the dead-letter
	// exchange for a dead-letter copy), for matching basic.return.
	exchange, key string
	sentAt        time.Time
	returned      string // reply of a basic.return matched to the last publish
	// suspect: in flight when the channel was closed by a refusal that
	// could belong to any of several messages; it is sent alone until its
	// outcome is known.
	suspect bool
	// probe: the first publish to an exchange not yet proven on this
	// connection, sent alone (see gate.admit).
	probe bool
	// unknown: in flight on a channel that ended, so the broker may have
	// routed it; publishing it again may deliver it twice.
	unknown bool
	// viaDLX: the next publish is the dead-letter copy; reason is why.
	viaDLX       bool
	deadLettered bool
	reason       string
	holdUntil    time.Time
	attempts     int
	// retryPending: failed, and will be retried (strict mode, MustDeliver)
	// once it reaches the head.
	retryPending bool
}

// machine is one Run: the ordered queue of jobs and the broker session, and
// a method per event (job in, publish, confirm, return, channel end,
// reconnect, hold timer, settle). Only Run's goroutine touches it.
type machine[T any] struct {
	p   *Publisher
	cfg *Config
	log *zap.Logger
	ctx context.Context
	in  <-chan Job[T]
	out chan<- Result[T]

	inOpen bool
	q      []*entry[T] // in job order; q[0] is the oldest unsettled job
	next   int         // q[next:] have not been offered to the current session
	sent   int         // entries in state sent
	// gate narrows the window to one message while suspects or a probe
	// are out (probe.go).
	gate gate
	// requeued: handOverHead put the head back to be published again.
	requeued bool
	// pool holds settled entries for reuse.
	pool entryPool[T]
	// keys counts the unconfirmed messages per Job.Key (Config.PerKey in
	// strict mode only; nil otherwise).
	keys keyCounts

	sess *session[T]
	// link is the connection the sessions are opened on, and the redial
	// (connect.go).
	link link
	// hold is the pause before a held head is retried (head.go).
	hold headHold
}

func newMachine[T any](ctx context.Context, p *Publisher, in <-chan Job[T], out chan<- Result[T]) *machine[T] {
	m := &machine[T]{p: p, cfg: &p.cfg, log: p.log, ctx: ctx, in: in, out: out, inOpen: true,
		pool: entryPool[T]{max: 4 * p.cfg.Window},
		link: link{p: p, cfg: &p.cfg},
		hold: headHold{p: p, backoff: backoff.Backoff{Initial: p.cfg.HoldBackoff.Base, Max: p.cfg.HoldBackoff.Max}}}
	m.link.node = int(p.nodeAt.Load()) % max(len(p.cfg.Nodes()), 1)
	if p.cfg.Strict && p.cfg.PerKey {
		m.keys = keyCounts{}
	}
	return m
}

// run is the event loop. Each turn it makes sure a session exists (or a
// redial is scheduled), publishes what the window allows, settles the head
// of the queue, then waits for one event.
func (m *machine[T]) run() error {
	defer m.shutdown()
	for {
		if err := m.step(); err != nil {
			return err
		}
		if !m.inOpen && len(m.q) == 0 {
			return nil
		}
		if err := m.wait(); err != nil {
			return err
		}
	}
}

// step does the work that needs no event: connect, publish, settle. A head
// put back for the dead-letter exchange or a retry is published at once;
// a second round cannot put it back again without a broker event (it is
// in flight, or held until its timer). So is the channel a publish found
// closed over a refusal (close.go keeps the connection and leaves the
// reopen to step): no event would come to reopen it.
func (m *machine[T]) step() error {
	for {
		if m.sess == nil && m.link.redialC == nil {
			m.connect()
		}
		if m.sess != nil {
			if err := m.pump(); err != nil {
				return err
			}
		}
		m.requeued = false
		if err := m.handOverHead(); err != nil {
			return err
		}
		if m.requeued {
			continue
		}
		if m.sess != nil || m.link.redialC != nil {
			return nil
		}
		if err := m.ctx.Err(); err != nil {
			return err // connect gave up: the dial was cancelled
		}
	}
}

func (m *machine[T]) wait() error {
	var in <-chan Job[T]
	if m.inOpen && len(m.q) < 4*m.cfg.Window && m.sent < m.gate.window(m.cfg.Window) {
		in = m.in
	}
	var confirms <-chan amqp.Confirmation
	var returns <-chan amqp.Return
	var closes <-chan *amqp.Error
	if m.sess != nil {
		confirms, returns, closes = m.sess.confirms, m.sess.returns, m.sess.closes
	}
	select {
	case <-m.ctx.Done():
		return m.ctx.Err()
	case job, ok := <-in:
		m.intake(job, ok)
	case r, ok := <-returns:
		if !ok {
			return m.channelEnded()
		}
		m.onReturn(m.sess, r)
	case c, ok := <-confirms:
		if !ok {
			return m.channelEnded()
		}
		m.drainReturns()
		m.onConfirm(m.sess, c)
	case cerr := <-closes:
		m.sess.closeErr, m.sess.closeSeen = cerr, true
		return m.channelEnded()
	case <-m.link.redialC:
		m.link.redialC = nil
		m.connect()
	case <-m.hold.c:
		m.hold.c = nil
		m.releaseHold()
	}
	return nil
}

func (m *machine[T]) intake(job Job[T], ok bool) {
	if !ok {
		m.inOpen = false
		return
	}
	e := m.pool.get()
	e.job = job
	m.q = append(m.q, e)
}

// entryPool keeps settled entries for the next jobs: once an entry's
// result is handed over nothing refers to it (a confirmation removes it
// from the session's delivery tags before it settles, and a session that
// ended is dropped whole), and a drain of a backlog then allocates no entry
// per message. It keeps at most max (4 windows).
type entryPool[T any] struct {
	free []*entry[T]
	max  int
}

// get returns a cleared entry, reused if one is free.
func (p *entryPool[T]) get() *entry[T] {
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		return e
	}
	return &entry[T]{}
}

// recycle keeps a settled entry for the next job.
func (p *entryPool[T]) recycle(e *entry[T]) {
	if len(p.free) < p.max {
		*e = entry[T]{}
		p.free = append(p.free, e)
	}
}

// pump publishes waiting entries in job order while the window allows.
func (m *machine[T]) pump() error {
	for m.sess != nil && m.next < len(m.q) && m.sent < m.gate.window(m.cfg.Window) {
		e := m.q[m.next]
		if e.retryPending {
			return nil // nothing overtakes a message that will be retried
		}
		if e.job.Msg == nil || e.state != waiting {
			m.next++
			continue
		}
		if !e.holdUntil.IsZero() {
			return nil // held: nothing overtakes it
		}
		if m.keys.busy(e.job.Key) {
			return nil // strict per key: one of its key is unconfirmed
		}
		ok, probe := m.gate.admit(e.nextExchange(m.cfg.DeadLetterExchange), m.sent)
		if !ok {
			return nil // the probe waits for everything in flight
		}
		if err := m.p.guarded(); err != nil {
			return err // the lease is lost: nothing more is written
		}
		if err := m.send(e); err != nil {
			return err
		}
		if probe && e.state == sent {
			e.probe = true
			m.gate.probes++
		}
		if m.sess == nil || e.retryPending {
			return nil // the session ended, or e failed and will be retried
		}
		m.next++
	}
	return nil
}

// arm sets *t to fire after d, making the timer on first use, and returns
// its channel (the redial and the hold timer).
func arm(t **time.Timer, d time.Duration) <-chan time.Time {
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
	return (*t).C
}

// shutdown closes the connection without waiting long for a dead peer.
func (m *machine[T]) shutdown() {
	m.p.connected.Store(false)
	m.hold.stop()
	m.link.close()
}

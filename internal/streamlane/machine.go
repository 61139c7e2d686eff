package streamlane

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// entry is one job in the order: a marker (done at once), a message in
// flight (in bySeq), or a message whose outcome is known.
type entry[T any] struct {
	job     publisher.Job[T]
	done    bool
	err     error
	sentAt  time.Time
	latency time.Duration
}

// machine is one Run: the jobs in order, the messages in flight by
// publishing id, and a method per event (job in, result out, confirms,
// producer closed, send failed, confirm timer). Only Run's goroutine
// touches it.
type machine[T any] struct {
	l   *Lane[T]
	cfg *Config
	log *zap.Logger
	ctx context.Context
	in  <-chan publisher.Job[T]
	out chan<- publisher.Result[T]
	s   Producer
	snd *sender

	inOpen bool
	q      []*entry[T] // in job order; q[0] is the next result owed
	bySeq  map[int64]*entry[T]
	// lastID is the highest publishing id sent in this Run: the next must
	// be above it, or the broker would drop it as a duplicate.
	lastID int64
	timer  *time.Timer
	timerC <-chan time.Time
}

func newMachine[T any](ctx context.Context, l *Lane[T], s Producer, snd *sender,
	in <-chan publisher.Job[T], out chan<- publisher.Result[T]) *machine[T] {
	return &machine[T]{l: l, cfg: &l.cfg, log: l.log, ctx: ctx, in: in, out: out, s: s, snd: snd,
		inOpen: true, bySeq: make(map[int64]*entry[T], l.cfg.Window)}
}

// run is the event loop: each turn waits for one event. A job is taken
// only while the window has room (and the queue of owed results is
// bounded, for a slow reader of out); a result goes out only when the
// oldest job is settled.
func (m *machine[T]) run() error {
	defer m.stopTimer()
	for {
		if !m.inOpen && len(m.q) == 0 {
			return nil
		}
		var in <-chan publisher.Job[T]
		if m.inOpen && len(m.bySeq) < m.cfg.Window && len(m.q) < 4*m.cfg.Window {
			in = m.in
		}
		var out chan<- publisher.Result[T]
		var res publisher.Result[T]
		if len(m.q) > 0 && m.q[0].done {
			out, res = m.out, m.result(m.q[0])
		}
		m.armTimer()
		select {
		case <-m.ctx.Done():
			m.handOverSettled()
			return m.ctx.Err()
		case job, ok := <-in:
			if !ok {
				m.inOpen = false
				continue
			}
			if job.Msg != nil {
				if err := m.l.guarded(); err != nil {
					return err // the lease is lost: nothing more is sent
				}
			}
			m.intake(job)
		case out <- res:
			m.q[0] = nil
			m.q = m.q[1:]
		case sts, ok := <-m.s.Confirms():
			if !ok {
				return m.fail(errors.New("the client closed the producer's confirms"))
			}
			if err := m.onConfirms(sts); err != nil {
				return m.fail(err)
			}
		case ev := <-m.s.Closed():
			return m.fail(m.onClosed(ev))
		case err := <-m.snd.errs:
			return m.fail(err)
		case <-m.timerC:
			m.timerC = nil
			if err := m.checkTimeout(); err != nil {
				return m.fail(err)
			}
		}
	}
}

func (m *machine[T]) result(e *entry[T]) publisher.Result[T] {
	return publisher.Result[T]{Job: e.job, Err: e.err, Latency: e.latency}
}

// intake takes a job: a marker is settled at once, a message is sent or
// refused.
func (m *machine[T]) intake(job publisher.Job[T]) {
	e := &entry[T]{job: job}
	m.q = append(m.q, e)
	if job.Msg == nil {
		e.done = true
		return
	}
	if err := m.publish(e); err != nil {
		e.done, e.err = true, err
	}
}

// publish checks the message and hands it to the sender. The send never
// blocks: the sender's queue holds a window and at most a window is in
// flight.
func (m *machine[T]) publish(e *entry[T]) error {
	seq := e.job.Seq
	switch {
	case seq == 0:
		// The broker's "nothing stored" is 0 too: ids start at 1.
		return fmt.Errorf("%w: publishing id 0 (ids start at 1)", ErrRefused)
	case seq > math.MaxInt64:
		return fmt.Errorf("%w: publishing id %d is over the stream protocol's 2^63-1", ErrRefused, seq)
	case int64(seq) <= m.lastID:
		return fmt.Errorf("%w: publishing id %d is not above %d, published before it: the broker would drop it as a duplicate",
			ErrRefused, seq, m.lastID)
	}
	id := int64(seq)
	msg, skipped := toStream(e.job.Msg, id)
	if len(skipped) > 0 {
		m.l.warnSkipped(skipped, e.job.Msg.Publishing.MessageId)
	}
	b, err := msg.MarshalBinary()
	if err != nil {
		return fmt.Errorf("%w: encoding publishing id %d: %v", ErrRefused, seq, err)
	}
	size := len(b) + perMessageBytes
	if frameHeader+size > m.cfg.MaxFrameBytes {
		return fmt.Errorf("%w: publishing id %d: %d bytes encoded, over one frame of %d (stream.max_frame_bytes, and the broker's stream.frame_max)",
			ErrRefused, seq, len(b), m.cfg.MaxFrameBytes)
	}
	m.lastID = id
	e.sentAt = time.Now()
	m.bySeq[id] = e
	m.snd.in <- outgoing{msg: encoded{AMQP10: msg, bytes: b}, size: size}
	return nil
}

// onConfirms settles the messages of a batch of statuses. A status that
// is not a confirm (a publish error, the client's own timeout) fails the
// lane: the messages after it may be stored, so nothing is sent past it.
// A message the broker dropped as a duplicate is confirmed like any other.
func (m *machine[T]) onConfirms(sts []Confirm) error {
	var failure error
	now := time.Now()
	for _, cs := range sts {
		id := cs.ID
		e := m.bySeq[id]
		if e == nil {
			continue // already settled (a send error reported it too)
		}
		delete(m.bySeq, id)
		e.done, e.latency = true, now.Sub(e.sentAt)
		if cs.Err == nil {
			continue
		}
		cause := fmt.Errorf("publishing id %d: %w", id, cs.Err)
		e.err = fmt.Errorf("%w: %w", ErrUnconfirmed, cause)
		if failure == nil {
			failure = cause
		}
	}
	return failure
}

// onClosed is the producer closed by the client (the connection lost, the
// stream deleted): the confirms it had read before are taken first, until
// the client closes the confirms channel (it reports what is still
// unconfirmed there as failed), within the connect deadline.
func (m *machine[T]) onClosed(ev stream.Event) error {
	cause := fmt.Errorf("producer closed: %s", ev.Reason)
	if ev.Err != nil {
		cause = fmt.Errorf("producer closed: %s: %w", ev.Reason, ev.Err)
	}
	t := time.NewTimer(m.cfg.ConnectTimeout)
	defer t.Stop()
	for len(m.bySeq) > 0 {
		select {
		case sts, ok := <-m.s.Confirms():
			if !ok {
				return cause
			}
			m.takeConfirmed(sts)
		case <-t.C:
			return cause
		case <-m.ctx.Done():
			return cause
		}
	}
	return cause
}

// armTimer keeps a timer on the oldest message in flight. Messages are
// sent in job order, so the first unsettled message of the queue is the
// oldest.
func (m *machine[T]) armTimer() {
	if m.timerC != nil || len(m.bySeq) == 0 {
		return
	}
	oldest := m.oldest()
	if oldest == nil {
		return
	}
	d := time.Until(oldest.sentAt.Add(m.cfg.ConfirmTimeout))
	if m.timer == nil {
		m.timer = time.NewTimer(d)
	} else {
		m.timer.Reset(d)
	}
	m.timerC = m.timer.C
}

func (m *machine[T]) stopTimer() {
	if m.timer != nil {
		m.timer.Stop()
	}
}

func (m *machine[T]) oldest() *entry[T] {
	for _, e := range m.q {
		if !e.done {
			return e
		}
	}
	return nil
}

func (m *machine[T]) checkTimeout() error {
	e := m.oldest()
	if e == nil || time.Since(e.sentAt) < m.cfg.ConfirmTimeout {
		return nil // armTimer sets the next deadline
	}
	return fmt.Errorf("publishing id %d not confirmed within %s (stream.confirm_timeout)", e.job.Seq, m.cfg.ConfirmTimeout)
}

// fail fails the lane: every job not settled comes out failed, in order,
// after the ones settled; then Run returns the cause. A marker behind a
// message not confirmed comes out failed too: its transaction is not
// settled, and a commit applied past a row whose outcome is unknown would
// let the checkpoint pass it (invariant 2). Confirms already waiting are
// taken first.
func (m *machine[T]) fail(cause error) error {
	m.l.connected.Store(false)
	m.takeWaitingConfirms()
	cause = scrub(cause, m.l.secrets)
	behind := false
	for _, e := range m.q {
		if !e.done {
			e.done = true
			e.err = fmt.Errorf("%w: %w", ErrUnconfirmed, cause)
		}
		switch {
		case errors.Is(e.err, ErrUnconfirmed):
			behind = true
		case behind && e.job.Msg == nil:
			e.err = fmt.Errorf("%w: a message before this marker: %w", ErrUnconfirmed, cause)
		}
	}
	clear(m.bySeq)
	m.log.Debug("stream lane failed; failing the unconfirmed messages", zap.Int("results", len(m.q)), zap.Error(cause))
	for len(m.q) > 0 {
		select {
		case m.out <- m.result(m.q[0]):
			m.q[0] = nil
			m.q = m.q[1:]
		case <-m.ctx.Done():
			return m.ctx.Err()
		}
	}
	return fmt.Errorf("stream %s: %w", m.cfg.Stream, cause)
}

// takeWaitingConfirms settles what the client has already handed over.
func (m *machine[T]) takeWaitingConfirms() {
	for len(m.bySeq) > 0 {
		select {
		case sts, ok := <-m.s.Confirms():
			if !ok {
				return
			}
			m.takeConfirmed(sts)
		default:
			return
		}
	}
}

// takeConfirmed settles the confirmed messages of a batch of statuses
// taken while the lane fails. The others leave bySeq unsettled, for fail
// to give the lane's cause: the client reports every message still
// unconfirmed when it closes a producer as a confirm timeout, which is
// not why they failed.
func (m *machine[T]) takeConfirmed(sts []Confirm) {
	now := time.Now()
	for _, cs := range sts {
		id := cs.ID
		e := m.bySeq[id]
		if e == nil {
			continue
		}
		delete(m.bySeq, id)
		if cs.Err == nil {
			e.done, e.latency = true, now.Sub(e.sentAt)
		}
	}
}

// handOverSettled, once ctx has ended, hands over the settled results at
// the head while out has room, without waiting.
func (m *machine[T]) handOverSettled() {
	for len(m.q) > 0 && m.q[0].done {
		select {
		case m.out <- m.result(m.q[0]):
			m.q[0] = nil
			m.q = m.q[1:]
		default:
			return
		}
	}
}

package publisher

import (
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// handOverHead hands over the results at the head of the queue, in job order.
// A failed message that must not fail (MustDeliver, or any message in
// strict mode) stays at the head: it is dead-lettered or held.
func (m *machine[T]) handOverHead() error {
	for len(m.q) > 0 {
		e := m.q[0]
		if e.job.Msg != nil && e.state != done {
			return nil
		}
		if e.job.Msg != nil && e.err != nil && e.mustRetry(m.cfg.Strict) {
			m.retryHead(e)
			return nil
		}
		if err := m.emit(e); err != nil {
			return err
		}
		m.q[0] = nil
		m.q = m.q[1:]
		if m.next > 0 {
			m.next--
		}
		m.pool.recycle(e)
	}
	return nil
}

func (m *machine[T]) emit(e *entry[T]) error {
	r := Result[T]{Job: e.job, Err: e.err, DeadLettered: e.deadLettered, Reason: e.reason}
	if e.job.Msg != nil {
		if !e.sentAt.IsZero() {
			r.Latency = time.Since(e.sentAt)
		}
		// A failure is the caller's to log, with the row it belongs to.
		if e.deadLettered {
			m.p.warn.warn("message dead-lettered", zap.String("exchange", e.job.Msg.Exchange),
				zap.String("dead_letter_exchange", m.cfg.DeadLetterExchange), zap.String("reason", e.reason))
		}
		m.hold.clear()
	}
	select {
	case m.out <- r:
		return nil
	case <-m.ctx.Done():
		return m.ctx.Err()
	}
}

// retryHead sends a failed MustDeliver message to the dead-letter exchange
// if there is one and it has not just failed there; otherwise the stream
// holds behind it and it is retried with backoff.
func (m *machine[T]) retryHead(e *entry[T]) {
	m.requeued = true
	e.retryPending = false
	if e.job.MustDeliver && m.cfg.DeadLetterExchange != "" && !e.viaDLX {
		e.viaDLX, e.reason = true, e.err.Error()
		e.state, e.err = waiting, nil
		m.next = 0
		return
	}
	reason := e.err.Error()
	e.attempts++
	e.viaDLX, e.reason = false, ""
	e.state, e.err = waiting, nil
	e.holdUntil = time.Now().Add(m.hold.start(e.job.Msg, reason, e.attempts))
	m.next = 0
}

// releaseHold lets the held head be published again.
func (m *machine[T]) releaseHold() {
	if len(m.q) > 0 {
		m.q[0].holdUntil = time.Time{}
	}
	m.next = 0
}

// headHold is the pause before a held head is retried, and the Hold it
// shows (Publisher.Holding) meanwhile.
type headHold struct {
	p *Publisher
	t *time.Timer
	c <-chan time.Time // fires when the held head may be published again
	// backoff spaces the retries of a held head (Config.HoldBackoff:
	// Base doubling to Max); a delivered head resets it. The pause
	// is a timer in wait's select, which also ends on ctx, so the loop
	// keeps taking confirmations and returns while the head waits.
	backoff backoff.Backoff
}

// start holds the stream behind msg after its attempts-th failure, for
// reason: it shows the Hold, warns and arms the timer. It returns the wait.
func (h *headHold) start(msg *router.Message, reason string, attempts int) time.Duration {
	wait := h.backoff.Next()
	since := time.Now()
	if cur := h.p.hold.Load(); cur != nil {
		since = cur.Since
	}
	h.p.hold.Store(&Hold{MessageID: msg.Publishing.MessageId, Exchange: msg.Exchange, RoutingKey: msg.RoutingKey,
		Reason: reason, Since: since, Attempts: attempts})
	h.p.warn.warn("publish failed; the stream holds behind this message and retries it",
		zap.String("message_id", msg.Publishing.MessageId), zap.String("exchange", msg.Exchange),
		zap.String("reason", reason), zap.Duration("retry_in", wait))
	h.c = arm(&h.t, wait)
	return wait
}

// clear ends the hold, if any: a message was delivered.
func (h *headHold) clear() {
	if h.p.hold.Load() != nil {
		h.p.hold.Store(nil)
		h.backoff.Reset()
	}
}

func (h *headHold) stop() {
	if h.t != nil {
		h.t.Stop()
	}
}

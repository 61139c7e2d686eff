package publisher

import (
	"time"

	"go.uber.org/zap"
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
		if e.job.Msg != nil && e.err != nil && m.mustRetry(e) {
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
		m.recycle(e)
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
		if m.p.hold.Load() != nil {
			m.p.hold.Store(nil)
			m.holdBackoff.Reset()
		}
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
	wait := m.holdBackoff.Next()
	e.attempts++
	e.viaDLX, e.reason = false, ""
	e.state, e.err = waiting, nil
	e.holdUntil = time.Now().Add(wait)
	m.next = 0
	since := time.Now()
	if h := m.p.hold.Load(); h != nil {
		since = h.Since
	}
	msg := e.job.Msg
	m.p.hold.Store(&Hold{MessageID: msg.Publishing.MessageId, Exchange: msg.Exchange, RoutingKey: msg.RoutingKey,
		Reason: reason, Since: since, Attempts: e.attempts})
	m.p.warn.warn("publish failed; the stream holds behind this message and retries it",
		zap.String("message_id", msg.Publishing.MessageId), zap.String("exchange", msg.Exchange),
		zap.String("reason", reason), zap.Duration("retry_in", wait))
	m.holdC = arm(&m.holdT, wait)
}

// releaseHold lets the held head be published again.
func (m *machine[T]) releaseHold() {
	if len(m.q) > 0 {
		m.q[0].holdUntil = time.Time{}
	}
	m.next = 0
}

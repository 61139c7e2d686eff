package publisher

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// channelEnded handles the end of the publishing channel, whatever ended
// it. It first applies every return and confirmation the channel delivered
// before it closed (each notification channel is read until closed, so a
// closed one is never selected on again), then classifies the close:
//
//   - a refusal (the broker closed the channel, or the connection over a
//     malformed frame) belongs to one of the messages still unconfirmed. If
//     there is one, it is the culprit and fails with the broker's reply. If
//     there are several, the broker does not say which (it discards every
//     publish after the culprit, and an earlier message may simply not be
//     confirmed yet), so they all become suspects and are sent one at a
//     time: the next refusal then names its culprit. A message is never
//     republished into the refusal it caused. The connection is kept and
//     only the channel is reopened.
//   - anything else is the connection's: it is closed and redialled with
//     backoff, and every unconfirmed message is republished in order.
func (m *machine[T]) channelEnded() error {
	s := m.sess
	m.sess = nil // Connected() stays true unless the connection goes too
	cerr, rets, confs := s.ended(m.ctx)
	for _, r := range rets {
		m.onReturn(s, r)
	}
	for _, c := range confs {
		m.onConfirm(s, c)
	}
	inflight := m.unsend()
	connClosed := m.link.conn == nil || m.link.conn.IsClosed()
	if refusalCode(cerr, connClosed) && len(inflight) > 0 {
		m.refused(cerr, inflight)
		if !connClosed {
			m.link.check = s.check // still open on this connection
			return nil             // step reopens the channel at once
		}
	} else {
		m.p.warn.warn("broker connection lost; unconfirmed messages will be republished",
			zap.String("broker", m.p.Node()), zap.String("reason", closeReason(cerr)), zap.Int("unconfirmed", len(inflight)))
	}
	m.link.drop()
	m.link.scheduleRedial()
	return nil
}

// connectionFailed ends the session over an error of the connection: the
// close shuts the channel down, and channelEnded drains and classifies it.
func (m *machine[T]) connectionFailed(err error) error {
	m.p.warn.warn("broker connection failed", zap.String("broker", m.p.Node()), zap.Error(err))
	m.link.drop()
	if m.sess == nil {
		m.link.scheduleRedial()
		return nil
	}
	return m.channelEnded()
}

// unsend returns the entries in flight on the ended channel, in job order,
// as waiting: their fate there is unknown.
func (m *machine[T]) unsend() []*entry[T] {
	var inflight []*entry[T]
	for _, e := range m.q {
		if e.state == sent {
			e.state, e.probe, e.unknown = waiting, false, true
			inflight = append(inflight, e)
		}
	}
	m.sent, m.next, m.gate.probes = 0, 0, 0
	if m.keys != nil {
		clear(m.keys)
	}
	return inflight
}

// refused settles the culprit of a refusal, or marks the suspects.
func (m *machine[T]) refused(cerr *amqp.Error, inflight []*entry[T]) {
	if len(inflight) > 1 {
		for _, e := range inflight {
			if !e.suspect {
				e.suspect = true
				m.gate.suspects++
			}
		}
		m.p.warn.warn("the broker refused one of several messages in flight; sending them one at a time to find it",
			zap.Int("code", cerr.Code), zap.String("reason", cerr.Reason), zap.Int("suspects", m.gate.suspects))
		return
	}
	e := inflight[0]
	kind := ErrRefused
	if cerr.Code == amqp.NotFound {
		kind = ErrNoExchange
		m.p.exchanges.put(e.exchange, false)
	}
	m.fail(e, fmt.Errorf("%w: %d %s (exchange %q, routing key %q)", kind, cerr.Code, cerr.Reason, e.exchange, e.key))
}

func closeReason(e *amqp.Error) string {
	if e == nil {
		return "closed by the client"
	}
	return fmt.Sprintf("%d %s", e.Code, e.Reason)
}

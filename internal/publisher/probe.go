package publisher

import "time"

// A channel the broker closes over one publish (403 ACCESS_REFUSED for an
// internal exchange or one this user may not write to) discards every
// publish behind it, and the close does not say which publish caused it.
// The messages published before the culprit whose confirmations had not
// arrived yet have an unknown fate: the broker may have routed them, so
// publishing them again can deliver them twice. The refusals that belong
// to an exchange are therefore met one at a time: the first publish to an
// exchange not yet proven on this connection waits until everything in
// flight is confirmed, then goes alone and waits for its own confirmation.
// A refusal then names that one message and costs no other message a
// duplicate; a confirmation (ack, nack or return all mean the broker took
// the publish, permissions included) proves the exchange, and the stream to
// it is pipelined again. A proof lasts provenFor, so a stream to a few
// proven exchanges pays one round trip per exchange that often.

// provenFor is how long an exchange stays proven without a new probe.
const provenFor = 30 * time.Second

// probeGate reports whether e may be published now, and whether that
// publish is a probe (its exchange is not proven on this connection).
func (m *machine[T]) probeGate(e *entry[T]) (ok, probe bool) {
	if m.isProven(m.exchangeOf(e)) {
		return true, false
	}
	return m.sent == 0, true
}

// exchangeOf is the exchange e's next publish goes to.
func (m *machine[T]) exchangeOf(e *entry[T]) string {
	if e.viaDLX {
		return m.cfg.DeadLetterExchange
	}
	return e.job.Msg.Exchange
}

// provenKey names the default exchange, which the cache cannot hold as "",
// by the name RabbitMQ checks permissions against.
func provenKey(exchange string) string {
	if exchange == "" {
		return "amq.default"
	}
	return exchange
}

func (m *machine[T]) isProven(exchange string) bool {
	if m.proven == nil {
		return false
	}
	ok, _ := m.proven.get(provenKey(exchange))
	return ok
}

// prove records that the broker took a publish to exchange on this
// connection.
func (m *machine[T]) prove(exchange string) {
	if m.proven == nil {
		m.proven = newExchangeCache(4096)
		m.proven.positive = provenFor
	}
	m.proven.put(provenKey(exchange), true)
}

// forgetProofs starts a new connection with nothing proven: permissions
// may have changed while it was away.
func (m *machine[T]) forgetProofs() { m.proven = nil }

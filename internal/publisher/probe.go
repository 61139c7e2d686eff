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

// gate is the bookkeeping that narrows the window to one message in
// flight: the suspects of a refusal that named no culprit (close.go) and
// the probes of exchanges not yet proven. The counts follow the entries'
// suspect and probe flags.
type gate struct {
	// suspects counts unresolved suspects; while there are any, one
	// message at a time is in flight so the next refusal names its culprit.
	suspects int
	// probes counts probes in flight (0 or 1): while one is, it is the
	// only message in flight.
	probes int
	// proven holds the exchanges that took a publish from this user on
	// the current connection.
	proven *exchangeCache
}

// window is how many messages may be unconfirmed, of n (Config.Window):
// one while suspects are being resolved or a probe is out (or in strict
// mode, where Defaults sets Window to 1).
func (g *gate) window(n int) int {
	if g.suspects > 0 || g.probes > 0 {
		return 1
	}
	return n
}

// admit reports whether a publish to exchange may go now, with sent
// messages in flight, and whether that publish is a probe (the exchange is
// not proven on this connection).
func (g *gate) admit(exchange string, sent int) (ok, probe bool) {
	if g.isProven(exchange) {
		return true, false
	}
	return sent == 0, true
}

// nextExchange is the exchange e's next publish goes to: dlx, the
// dead-letter exchange, for its dead-letter copy.
func (e *entry[T]) nextExchange(dlx string) string {
	if e.viaDLX {
		return dlx
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

func (g *gate) isProven(exchange string) bool {
	if g.proven == nil {
		return false
	}
	ok, _ := g.proven.get(provenKey(exchange))
	return ok
}

// prove records that the broker took a publish to exchange on this
// connection.
func (g *gate) prove(exchange string) {
	if g.proven == nil {
		g.proven = newExchangeCache(4096)
		g.proven.positive = provenFor
	}
	g.proven.put(provenKey(exchange), true)
}

// forgetProofs starts a new connection with nothing proven: permissions
// may have changed while it was away.
func (g *gate) forgetProofs() { g.proven = nil }

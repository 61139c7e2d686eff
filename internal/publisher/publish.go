package publisher

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// send publishes one entry (or its dead-letter copy) on the current
// channel, after the checks that keep a bad message from closing it: AMQP
// limits and the exchange's existence. A message that fails a check is
// settled here and never reaches the broker. The returned error is only
// the context's; a failing connection ends the session instead.
func (m *machine[T]) send(e *entry[T]) error {
	msg := e.job.Msg
	exchange, key, pub := msg.Exchange, msg.RoutingKey, msg.Publishing
	if e.viaDLX {
		exchange, key, pub = e.deadLetter(m.cfg.DeadLetterExchange)
	}
	if err := checkLimits(exchange, key, &pub, m.sess.frameMax, cmp.Or(m.cfg.MaxMessageSize, m.sess.maxBody)); err != nil {
		m.fail(e, err)
		return nil
	}
	exists, err := m.p.exchanges.exists(exchange, m.sess.exchangeExists)
	if err != nil {
		return m.connectionFailed(err)
	}
	if !exists {
		m.fail(e, fmt.Errorf("%w: %q (404 NOT_FOUND, checked passively)", ErrNoExchange, exchange))
		return nil
	}
	ch := m.sess.ch
	seq := ch.GetNextPublishSeqNo()
	if err := ch.PublishWithContext(m.ctx, exchange, key, true, false, pub); err != nil {
		if m.ctx.Err() != nil {
			return m.ctx.Err()
		}
		if ch.IsClosed() {
			return m.channelEnded()
		}
		// The client could not encode it (the checks above should have
		// caught that); a frame may be half written, so the connection
		// is not trusted either.
		m.fail(e, fmt.Errorf("%w: the client could not encode it: %v", ErrRefused, err))
		return m.connectionFailed(err)
	}
	e.state, e.seq, e.exchange, e.key, e.returned = sent, seq, exchange, key, ""
	e.sentAt = time.Now()
	if e.unknown {
		// The broker may have routed the earlier copy: a possible
		// duplicate, counted (Publisher.Republished).
		e.unknown = false
		m.p.republished.Add(1)
	}
	m.sess.bySeq[seq] = e
	m.sent++
	m.keys.add(e.job.Key)
	return nil
}

// keyCounts counts the unconfirmed messages per Job.Key (strict per key);
// nil counts nothing.
type keyCounts map[uint64]int

// busy reports whether a message of key is unconfirmed.
func (k keyCounts) busy(key uint64) bool { return k != nil && k[key] > 0 }

// add counts one more unconfirmed message of key.
func (k keyCounts) add(key uint64) {
	if k != nil {
		k[key]++
	}
}

// release forgets one unconfirmed message of key.
func (k keyCounts) release(key uint64) {
	if k == nil {
		return
	}
	if n := k[key]; n > 1 {
		k[key] = n - 1
	} else {
		delete(k, key)
	}
}

// fail settles an entry with a per-message failure.
func (m *machine[T]) fail(e *entry[T], err error) {
	if e.state == sent {
		m.sent--
		m.keys.release(e.job.Key)
	}
	if e.suspect {
		e.suspect = false
		m.gate.suspects--
	}
	if e.probe {
		e.probe = false
		m.gate.probes--
	}
	e.state, e.err, e.unknown = done, err, false
	if err != nil && e.mustRetry(m.cfg.Strict) {
		// Nothing behind it may be published until it is retried: move
		// the publish cursor back to it, where pump stops.
		e.retryPending = true
		for i, x := range m.q[:min(m.next, len(m.q))] {
			if x == e {
				m.next = i
				break
			}
		}
	}
}

// mustRetry: a failure of this message is not a result but a retry (at the
// dead-letter exchange or in place) that nothing behind it may overtake;
// strict is Config.Strict.
func (e *entry[T]) mustRetry(strict bool) bool {
	return e.job.MustDeliver || strict
}

// onConfirm settles the entry a confirmation is for. amqp091-go hands
// confirmations over one per tag in tag order, after any basic.return of
// the same message.
func (m *machine[T]) onConfirm(s *session[T], c amqp.Confirmation) {
	e := s.bySeq[c.DeliveryTag]
	if e == nil || e.state != sent {
		return
	}
	delete(s.bySeq, c.DeliveryTag)
	if e.probe {
		// Acked, nacked or returned: the broker took the publish.
		m.gate.prove(e.exchange)
	}
	var err error
	switch {
	case e.returned != "":
		err = fmt.Errorf("%w: %s", ErrReturned, e.returned)
	case !c.Ack:
		err = fmt.Errorf("%w (exchange %q, routing key %q)", ErrNacked, e.exchange, e.key)
	default:
		m.link.streak = 0 // the connection works
		e.deadLettered = e.viaDLX
	}
	if err != nil && e.viaDLX {
		err = fmt.Errorf("dead-letter exchange: %w", err)
	}
	m.fail(e, err)
}

// drainReturns takes the returns already buffered: they precede the
// confirmation about to be applied. A closed channel is left for the next
// select, which ends the session.
func (m *machine[T]) drainReturns() {
	for {
		select {
		case r, ok := <-m.sess.returns:
			if !ok {
				return
			}
			m.onReturn(m.sess, r)
		default:
			return
		}
	}
}

// onReturn matches a basic.return to its publish. A return carries no
// delivery tag, so the match uses order: the broker processes a channel's
// publishes one after another and sends each return before that message's
// confirmation, so returns arrive in publish order and a return belongs to
// a message that is still unconfirmed and published after the one the
// previous return matched. Of those, it is the first whose exchange,
// routing key, message id and body are the ones returned. Two messages in
// flight with the same id but another routing key or body are told apart;
// only copies identical in all four could be confused, and a return then
// fails the earlier copy, which routes identically unless the bindings
// changed between the two publishes.
func (m *machine[T]) onReturn(s *session[T], r amqp.Return) {
	var best *entry[T]
	for _, e := range m.q {
		if e.state != sent || e.seq <= s.lastReturn || s.bySeq[e.seq] != e {
			continue
		}
		if best != nil && e.seq > best.seq {
			continue
		}
		pub := &e.job.Msg.Publishing
		if e.exchange == r.Exchange && e.key == r.RoutingKey && pub.MessageId == r.MessageId && bytes.Equal(pub.Body, r.Body) {
			best = e
		}
	}
	if best == nil {
		m.p.warn.warn("a basic.return matched no message in flight")
		return
	}
	s.lastReturn = best.seq
	best.returned = fmt.Sprintf("%d %s (exchange %q, routing key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
}

// Headers of a dead-letter copy.
const (
	HeaderReason             = "x-relay-reason"
	HeaderOriginalExchange   = "x-relay-original-exchange"
	HeaderOriginalRoutingKey = "x-relay-original-routing-key"
)

// deadLetter is the copy of a message for the dead-letter exchange: same
// body and properties, the reason and original route in headers, and the
// original routing key. A routing key or property over the 255-byte limit
// (which may be why it is here) cannot be sent as it is: the key is left
// empty and such a property moves to an x-relay-original-<name> header.
// dlx is the dead-letter exchange.
func (e *entry[T]) deadLetter(dlx string) (string, string, amqp.Publishing) {
	msg := e.job.Msg
	pub := msg.Publishing
	pub.Headers = make(amqp.Table, len(msg.Publishing.Headers)+3)
	maps.Copy(pub.Headers, msg.Publishing.Headers)
	pub.Headers[HeaderReason] = e.reason
	pub.Headers[HeaderOriginalExchange] = msg.Exchange
	pub.Headers[HeaderOriginalRoutingKey] = msg.RoutingKey
	for name, v := range map[string]*string{"message-id": &pub.MessageId, "type": &pub.Type,
		"correlation-id": &pub.CorrelationId, "reply-to": &pub.ReplyTo, "app-id": &pub.AppId,
		"user-id": &pub.UserId, "content-type": &pub.ContentType, "content-encoding": &pub.ContentEncoding,
		"expiration": &pub.Expiration} {
		if len(*v) > shortstrMax {
			pub.Headers["x-relay-original-"+name] = *v
			*v = ""
		}
	}
	key := msg.RoutingKey
	if len(key) > shortstrMax {
		key = ""
	}
	return dlx, key, pub
}

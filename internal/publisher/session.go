package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one publishing channel in confirm mode on one connection, with
// a second channel for passive exchange checks (a 404 on a passive declare
// closes the channel it was made on, so it must not be the publishing one).
type session[T any] struct {
	conn     amqpConn
	ch       amqpChannel
	check    amqpChannel // opened on first use, reopened after a 404
	confirms chan amqp.Confirmation
	returns  chan amqp.Return
	closes   chan *amqp.Error
	// closeErr is the close notification once the event loop has taken
	// it (closeSeen); the channel then has nothing more to give.
	closeErr  *amqp.Error
	closeSeen bool
	frameMax  int
	maxBody   int // the broker's default max_message_size (amqpConn.MaxMessageSize)
	// bySeq maps this channel's delivery tags to their entries.
	bySeq map[uint64]*entry[T]
	// lastReturn is the tag the latest basic.return was matched to: returns
	// arrive in publish order, so the next one belongs to a later publish.
	lastReturn uint64
}

// openChannel opens the publishing channel on conn. The notification
// buffers hold a full window: amqp091-go waits at most 5 s for a listener
// before it drops a confirmation, and at most Window messages are
// unconfirmed on this side.
func openChannel[T any](conn amqpConn, window int) (*session[T], error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("opening channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("enabling publisher confirms: %w", err)
	}
	return &session[T]{
		conn: conn, ch: ch, frameMax: conn.FrameMax(), maxBody: conn.MaxMessageSize(),
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, window+16)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, window+16)),
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		bySeq:    map[uint64]*entry[T]{},
	}, nil
}

// drainTimeout bounds the wait for a shut-down channel's notifications to
// be closed; amqp091-go closes them right after the close notification, so
// this only guards against a library that does not.
const drainTimeout = 5 * time.Second

// ended waits for the channel's shutdown to finish and returns its error
// (nil when the client closed it) and the returns and confirmations still
// buffered, in the order they were delivered. It never selects on a closed
// channel twice: each notification channel is read until it is closed.
func (s *session[T]) ended(ctx context.Context) (*amqp.Error, []amqp.Return, []amqp.Confirmation) {
	timeout := time.NewTimer(drainTimeout)
	defer timeout.Stop()
	cerr := s.closeErr
	if !s.closeSeen {
		select {
		case cerr = <-s.closes:
		case <-timeout.C:
		case <-ctx.Done():
		}
	}
	var rets []amqp.Return
	var confs []amqp.Confirmation
	for rs, cs := s.returns, s.confirms; rs != nil || cs != nil; {
		select {
		case r, ok := <-rs:
			if !ok {
				rs = nil
				continue
			}
			rets = append(rets, r)
		case c, ok := <-cs:
			if !ok {
				cs = nil
				continue
			}
			confs = append(confs, c)
		case <-timeout.C:
			return cerr, rets, confs
		case <-ctx.Done():
			return cerr, rets, confs
		}
	}
	return cerr, rets, confs
}

// exchangeExists declares the exchange passively on the check channel.
// A 404 answers "missing" (and closes that channel only); any other error
// is the connection's.
func (s *session[T]) exchangeExists(name string) (bool, error) {
	if s.check == nil || s.check.IsClosed() {
		ch, err := s.conn.Channel()
		if err != nil {
			return false, fmt.Errorf("opening a channel to check exchange %q: %w", name, err)
		}
		s.check = ch
	}
	err := s.check.ExchangeDeclarePassive(name, "topic", true, false, false, false, nil)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		s.check = nil
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking exchange %q: %w", name, err)
	}
	return true, nil
}

// refusalCode reports whether a close with this reply code was caused by
// something the client sent rather than by the broker or the network: every
// server-initiated close of the publishing channel (it only publishes), and
// the connection errors a malformed frame causes.
func refusalCode(e *amqp.Error, connClosed bool) bool {
	if e == nil || !e.Server {
		return false
	}
	if !connClosed {
		return true
	}
	switch e.Code {
	case amqp.FrameError, amqp.SyntaxError, amqp.CommandInvalid, amqp.UnexpectedFrame, amqp.NotImplemented:
		return true
	}
	return false
}

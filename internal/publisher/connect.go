package publisher

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// link is the broker connection a Run publishes on, across the sessions
// (channels) opened on it, and the redial when it is lost.
type link struct {
	p   *Publisher
	cfg *Config
	// conn is kept when only the channel is reopened.
	conn amqpConn
	// check is the exchange-check channel kept across a channel reopen.
	check amqpChannel
	// streak counts connections opened since the last confirmation: it
	// drives the reconnect backoff.
	streak int
	// node indexes Config.Nodes: the node of the current connection, or
	// the one dialled last; dialled says whether this Run dialled yet
	// (nodes.go).
	node    int
	dialled bool
	redial  *time.Timer
	redialC <-chan time.Time
	// unwatch stops the abort armed for conn when the Run's ctx ends
	// (watch).
	unwatch func() bool
}

// connect opens the publishing channel, dialling first when there is no
// open connection. On failure it schedules the next attempt.
func (m *machine[T]) connect() {
	dialled := false
	if m.link.conn == nil || m.link.conn.IsClosed() {
		if !m.link.dial(m.ctx) {
			return
		}
		dialled = true
		m.gate.forgetProofs()
	}
	s, err := openChannel[T](m.link.conn, m.cfg.Window)
	if err != nil {
		m.p.warn.warn("opening the publishing channel failed, reconnecting", zap.String("broker", m.p.Node()), zap.Error(err))
		m.link.drop()
		m.link.scheduleRedial()
		return
	}
	s.check, m.link.check = m.link.check, nil
	m.sess, m.next = s, 0
	m.p.connected.Store(true)
	msg := "publishing channel reopened after a refusal"
	if dialled {
		msg = "broker connected" // operators and tests look for this line
	}
	again, queued := m.backlog()
	fields := []zap.Field{zap.String("broker", m.p.Node()),
		zap.Int("republishing", again), zap.Int("queued", queued), zap.Int("suspects", m.gate.suspects)}
	if n := len(m.cfg.Nodes()); n > 1 {
		fields = append(fields, zap.Int("node", m.link.node+1), zap.Int("nodes", n))
	}
	m.log.Info(msg, fields...)
}

// dial opens a connection to the next node (nodes.go) and reports whether
// it did; on failure it schedules the next attempt.
func (l *link) dial(ctx context.Context) bool {
	l.streak++
	url := l.pickNode() // nodes.go
	conn, err := l.p.dial(ctx, url)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		l.p.warn.warn("broker connect failed, retrying", zap.String("broker", Redact(url)),
			zap.Error(err), zap.Duration("backoff", l.redialDelay()))
		l.scheduleRedial()
		return false
	}
	l.conn = conn
	l.watch(ctx)
	return true
}

// watch arms the abort of the connection for when ctx ends. The Run's own
// close (shutdown) is the clean one, with the close handshake; but a Run
// blocked in a write the broker does not read (a resource alarm) never
// gets there, and cancelling the context does not reach into amqp091-go's
// write (PublishWithContext checks it only before it starts). So, once
// ctx has ended, the socket is closed under it after closeTimeout: the
// write returns an error, the Run sees its context ended and returns. The
// message that write carried was not published as far as the Run knows,
// and nothing after it was confirmed: they are unconfirmed, published
// again by the next Run.
func (l *link) watch(ctx context.Context) {
	l.stopWatch() // a connection found closed is replaced without a drop
	conn := l.conn
	l.unwatch = context.AfterFunc(ctx, func() { time.AfterFunc(closeTimeout, conn.Abort) })
}

// stopWatch disarms watch's abort for a connection closed by the Run.
func (l *link) stopWatch() {
	if l.unwatch != nil {
		l.unwatch()
		l.unwatch = nil
	}
}

// redialDelay: the first connection after a healthy one is immediate, the
// next few back off from ReconnectMin, and from the fourth on at least a
// second apart, so no failure can make the publisher open more than one
// connection a second for long. With several nodes the backoff is per
// round: each node not yet tried since the last failure of the previous
// round is dialled at once (a node stopped for maintenance costs no wait
// when the next one is up), and the wait comes between rounds, so at most
// one connection per node a second.
func (l *link) redialDelay() time.Duration {
	n := max(len(l.cfg.Nodes()), 1)
	if l.streak%n != 0 {
		return 0 // the rest of this round
	}
	rounds := l.streak / n
	if rounds == 0 {
		return 0
	}
	b := backoff.Backoff{Initial: l.cfg.ReconnectMin, Max: l.cfg.ReconnectMax}
	d := b.Delay(rounds - 1)
	if rounds >= 3 && d < time.Second {
		d = time.Second
	}
	return d
}

func (l *link) scheduleRedial() {
	l.redialC = arm(&l.redial, l.redialDelay())
}

// drop closes the connection.
func (l *link) drop() {
	conn := l.conn
	l.conn, l.check = nil, nil
	l.p.connected.Store(false)
	l.stopWatch()
	closeWithin(conn)
}

// close stops the redial and closes the connection, at the end of a Run.
func (l *link) close() {
	if l.redial != nil {
		l.redial.Stop()
	}
	l.stopWatch()
	closeWithin(l.conn)
}

// closeTimeout bounds the close handshake, and the wait before a Run
// whose ctx ended aborts its connection (link.watch).
const closeTimeout = 2 * time.Second

// closeWithin closes conn (if any), waiting a bounded time: a close on a dead
// network waits for a close-ok that never comes, and one behind a write the
// broker does not read (a resource alarm) cannot even send its
// connection.close. Then the socket is closed under it (Abort), which
// releases both.
func closeWithin(conn amqpConn) {
	if conn == nil {
		return
	}
	closed := make(chan struct{})
	go func() { _ = conn.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(closeTimeout):
		conn.Abort()
	}
}

// unconfirmed counts messages whose outcome is not known yet.
// backlog splits the messages waiting for a channel: again were published
// on a channel that ended before their confirm (they go out a second time
// and count in Republished), queued were never published.
func (m *machine[T]) backlog() (again, queued int) {
	for _, e := range m.q {
		switch {
		case e.job.Msg == nil || e.state == done:
		case e.unknown:
			again++
		default:
			queued++
		}
	}
	return again, queued
}

package publisher

import (
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// connect opens the publishing channel, dialling first when there is no
// open connection. On failure it schedules the next attempt.
func (m *machine[T]) connect() {
	dialled := false
	if m.conn == nil || m.conn.IsClosed() {
		m.streak++
		url := m.pickNode() // nodes.go
		conn, err := m.p.dial(m.ctx, url)
		if err != nil {
			if m.ctx.Err() != nil {
				return
			}
			m.p.warn.warn("broker connect failed, retrying", zap.String("broker", Redact(url)),
				zap.Error(err), zap.Duration("backoff", m.redialDelay()))
			m.scheduleRedial()
			return
		}
		m.conn, dialled = conn, true
		m.forgetProofs()
	}
	s, err := openChannel[T](m.conn, m.cfg.Window)
	if err != nil {
		m.p.warn.warn("opening the publishing channel failed, reconnecting", zap.String("broker", m.p.Node()), zap.Error(err))
		m.dropConn()
		m.scheduleRedial()
		return
	}
	s.check, m.check = m.check, nil
	m.sess, m.next = s, 0
	m.p.connected.Store(true)
	msg := "publishing channel reopened after a refusal"
	if dialled {
		msg = "broker connected" // operators and tests look for this line
	}
	again, queued := m.backlog()
	fields := []zap.Field{zap.String("broker", m.p.Node()),
		zap.Int("republishing", again), zap.Int("queued", queued), zap.Int("suspects", m.suspects)}
	if n := len(m.cfg.Nodes()); n > 1 {
		fields = append(fields, zap.Int("node", m.node+1), zap.Int("nodes", n))
	}
	m.log.Info(msg, fields...)
}

// redialDelay: the first connection after a healthy one is immediate, the
// next few back off from ReconnectMin, and from the fourth on at least a
// second apart, so no failure can make the publisher open more than one
// connection a second for long. With several nodes the backoff is per
// round: each node not yet tried since the last failure of the previous
// round is dialled at once (a node stopped for maintenance costs no wait
// when the next one is up), and the wait comes between rounds, so at most
// one connection per node a second.
func (m *machine[T]) redialDelay() time.Duration {
	n := max(len(m.cfg.Nodes()), 1)
	if m.streak%n != 0 {
		return 0 // the rest of this round
	}
	rounds := m.streak / n
	if rounds == 0 {
		return 0
	}
	b := backoff.Backoff{Initial: m.cfg.ReconnectMin, Max: m.cfg.ReconnectMax}
	d := b.Delay(rounds - 1)
	if rounds >= 3 && d < time.Second {
		d = time.Second
	}
	return d
}

func (m *machine[T]) scheduleRedial() {
	m.redialC = arm(&m.redial, m.redialDelay())
}

// dropConn closes the connection.
func (m *machine[T]) dropConn() {
	conn := m.conn
	m.conn, m.check = nil, nil
	m.p.connected.Store(false)
	closeWithin(conn)
}

// closeWithin closes conn (if any), waiting a bounded time: a close on a dead
// network waits for a close-ok that never comes.
func closeWithin(conn amqpConn) {
	if conn == nil {
		return
	}
	closed := make(chan struct{})
	go func() { _ = conn.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
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

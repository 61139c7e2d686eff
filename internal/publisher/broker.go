package publisher

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// The publisher talks to the broker through these two small interfaces so
// that every state transition can be driven by a scripted fake in tests.
// The real implementation is amqp091-go; the fake reproduces the delivery
// contract documented here, which is amqp091-go v1.16.0's:
//
//   - confirmations reach the NotifyPublish channel one per delivery tag, in
//     tag order (a multiple ack is expanded; out-of-order acks are
//     resequenced), and a basic.return reaches NotifyReturn before the
//     confirmation of the same message (the broker sends the return first
//     and one reader goroutine dispatches both);
//   - when a channel shuts down, its NotifyClose listeners get the error (if
//     the close was not requested by the client), then the return, close and
//     confirm channels are closed: confirmations already buffered stay
//     readable, everything after is lost;
//   - a connection that shuts down is marked closed before its channels are
//     shut down with the connection's error.
type amqpConn interface {
	Channel() (amqpChannel, error)
	// FrameMax is the negotiated frame_max, which bounds the content header.
	FrameMax() int
	// MaxMessageSize is the broker's default max_message_size, told by the
	// version it announces (AMQP has no field for the limit itself).
	MaxMessageSize() int
	IsClosed() bool
	Close() error
	// Abort closes the socket at once, without the close handshake. A
	// broker in a memory or disk alarm blocks publishing connections: it
	// stops reading their socket but still sends heartbeats, so a write
	// that waits for it never returns, and neither does Close, whose
	// connection.close waits behind that write. Abort makes the write, and
	// every call waiting on the connection, return an error.
	Abort()
}

type amqpChannel interface {
	Confirm(noWait bool) error
	GetNextPublishSeqNo() uint64
	PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error
	NotifyPublish(c chan amqp.Confirmation) chan amqp.Confirmation
	NotifyReturn(c chan amqp.Return) chan amqp.Return
	NotifyClose(c chan *amqp.Error) chan *amqp.Error
	ExchangeDeclarePassive(name, kind string, durable, autoDelete, internal, noWait bool, args amqp.Table) error
	IsClosed() bool
	Close() error
}

// dialFunc opens one broker connection to url (one of Config.Nodes).
type dialFunc func(ctx context.Context, url string) (amqpConn, error)

type realConn struct {
	*amqp.Connection
	// sock is the batchConn under the connection (and under TLS).
	sock net.Conn
}

func (c realConn) Channel() (amqpChannel, error) {
	ch, err := c.Connection.Channel()
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// Abort closes the batchConn: a Write blocked on it returns net.ErrClosed,
// and amqp091-go's reader, seeing the closed socket, shuts the connection
// and its channels down.
func (c realConn) Abort() { _ = c.sock.Close() }

func (c realConn) FrameMax() int { return c.Connection.Config.FrameSize }

func (c realConn) MaxMessageSize() int {
	v, _ := c.Connection.Properties["version"].(string)
	return defaultMaxMessageSize(v)
}

// defaultMaxMessageSize is RabbitMQ's default max_message_size for the
// version a broker announces in connection.start: 16 MiB from 4.0 on, 128
// MiB before (3.8 to 3.13). A body over it closes the channel with 406
// PRECONDITION_FAILED, so the publisher refuses it first. A broker that
// announces no version (or another product) gets the larger figure: the
// broker's own refusal is then classified like any other.
func defaultMaxMessageSize(version string) int {
	major, _, _ := strings.Cut(version, ".")
	if n, err := strconv.Atoi(major); err == nil && n >= 4 {
		return 16 << 20
	}
	return 128 << 20
}

// dialAMQP is the production dialFunc: amqp091-go over a write-coalescing
// TCP connection. amqp091-go's dial takes no context, so it runs aside and
// a cancelled ctx returns at once (a connection that opens later is closed).
func (p *Publisher) dialAMQP(ctx context.Context, url string) (amqpConn, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(p.cfg.ConnectionName)
	type dialed struct {
		conn *amqp.Connection
		sock net.Conn
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		var sock net.Conn
		dial := batchDial(10*time.Second, p.guarded)
		conn, err := amqp.DialConfig(url, amqp.Config{
			Heartbeat:       10 * time.Second,
			TLSClientConfig: p.cfg.TLS,
			Properties:      props,
			Dial: func(network, addr string) (net.Conn, error) {
				c, err := dial(network, addr)
				sock = c
				return c, err
			},
		})
		done <- dialed{conn, sock, err}
	}()
	select {
	case d := <-done:
		if d.err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", Redact(url), Scrub(d.err, url))
		}
		go p.logBlocked(Redact(url), d.conn.NotifyBlocked(make(chan amqp.Blocking, 1)))
		return realConn{d.conn, d.sock}, nil
	case <-ctx.Done():
		go func() {
			if d := <-done; d.conn != nil {
				_ = d.conn.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// logBlocked logs when the broker blocks and unblocks publishing on the
// connection (connection.blocked, https://www.rabbitmq.com/docs/connection-blocked):
// during a memory or disk alarm RabbitMQ stops reading the socket of a
// connection that publishes, and publishing stalls with no error and no
// timeout (heartbeats still flow); these two lines say why. It ends when
// the connection closes (amqp091-go then closes blocks).
func (p *Publisher) logBlocked(broker string, blocks <-chan amqp.Blocking) {
	blocked := false
	for b := range blocks {
		switch {
		case b.Active && !blocked:
			p.log.Warn("broker blocked publishing (resource alarm)", zap.String("broker", broker), zap.String("reason", b.Reason))
		case !b.Active && blocked:
			p.log.Info("broker unblocked publishing", zap.String("broker", broker))
		}
		blocked = b.Active
	}
}

package inbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Publisher sends one message and returns only once the broker has taken
// responsibility for it (publisher confirm) or refused it.
type Publisher interface {
	Publish(ctx context.Context, exchange, routingKey string, msg amqp.Publishing) error
}

// ErrUnroutable means the broker returned a mandatory message: no queue is bound to
// its exchange and routing key. Republishing it will not help until the topology
// changes, so it counts as a used retry.
var ErrUnroutable = errors.New("message returned by the broker as unroutable")

// errNotConfirmed means the broker nacked the message, or the channel or connection
// closed before the confirm came (the error says which). Whether it arrived is
// unknown, so it is republished later without using up a retry.
var errNotConfirmed = errors.New("publish not confirmed by the broker")

// Dialer opens the TCP connection to the broker; nil means net.Dial. Tests use it to
// cut a connection the way a broker crash would.
type Dialer func(network, addr string) (net.Conn, error)

// AMQPPublisher publishes on its own connection (RabbitMQ advises keeping publishers off
// consumer connections, which flow control may block) with confirms and mandatory set.
// It redials lazily after any failure. Safe for concurrent use; publishes are
// serialised.
type AMQPPublisher struct {
	url  string
	dial Dialer
	name string

	mu      sync.Mutex
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// NewAMQPPublisher returns a publisher for url. name labels the connection in the
// broker's management UI.
func NewAMQPPublisher(url, name string, dial Dialer) *AMQPPublisher {
	return &AMQPPublisher{url: url, dial: dial, name: name}
}

// Publish implements Publisher.
func (p *AMQPPublisher) Publish(ctx context.Context, exchange, routingKey string, msg amqp.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.open(); err != nil {
		return err
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, routingKey, true, false, msg)
	if err != nil {
		p.closeLocked()
		return fmt.Errorf("publishing to exchange %q: %w", exchange, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		p.closeLocked() // a late confirm would be matched to nothing
		return fmt.Errorf("waiting for confirm: %w", err)
	}
	// RabbitMQ sends basic.return before the basic.ack of an unroutable mandatory
	// message, and the client hands both over from one reader goroutine, so the return
	// (if any) is already in the buffered channel.
	// https://www.rabbitmq.com/docs/confirms#when-publishes-are-confirmed
	// A channel that shut down closes its returns channel too: that reads as "no
	// value", and is not a return.
	select {
	case _, ok := <-p.returns:
		if ok {
			return fmt.Errorf("exchange %q routing key %q: %w", exchange, routingKey, ErrUnroutable)
		}
	default:
	}
	if !acked {
		why := p.unconfirmedReason()
		p.closeLocked()
		return fmt.Errorf("exchange %q routing key %q: %w: %s", exchange, routingKey, errNotConfirmed, why)
	}
	return nil
}

// unconfirmedReason tells a nack from a channel or connection that closed before the
// confirm (amqp091-go reports both as "not acked").
func (p *AMQPPublisher) unconfirmedReason() string {
	select {
	case e, ok := <-p.closes:
		if ok && e != nil {
			return fmt.Sprintf("the channel closed: %d %s", e.Code, e.Reason)
		}
		return "the channel closed"
	default:
	}
	if p.ch.IsClosed() {
		return "the channel closed"
	}
	return "nacked by the broker"
}

func (p *AMQPPublisher) open() error {
	if p.ch != nil && !p.ch.IsClosed() {
		return nil
	}
	p.closeLocked()
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(p.name)
	conn, err := amqp.DialConfig(p.url, amqp.Config{Dial: p.dial, Properties: props})
	if err != nil {
		return fmt.Errorf("connecting publisher to broker: %w", redactURL(err, p.url))
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("opening publisher channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = conn.Close()
		return fmt.Errorf("enabling publisher confirms: %w", err)
	}
	p.conn, p.ch = conn, ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 1))
	p.closes = ch.NotifyClose(make(chan *amqp.Error, 1))
	return nil
}

func (p *AMQPPublisher) closeLocked() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch, p.returns, p.closes = nil, nil, nil, nil
}

// Close closes the connection.
func (p *AMQPPublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
	return nil
}

// redactURL keeps the AMQP URL (which holds a password) out of an error message, in
// case a library error quotes it.
func redactURL(err error, url string) error {
	if err == nil || url == "" {
		return err
	}
	if s := err.Error(); strings.Contains(s, url) {
		return errors.New(strings.ReplaceAll(s, url, "amqp://<redacted>"))
	}
	return err
}

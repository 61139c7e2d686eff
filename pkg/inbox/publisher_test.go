package inbox

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// cutOnWrite dials the broker; once armed, the next write goes out and the
// connection is cut right after it, before the broker's confirm can be read.
type cutOnWrite struct {
	armed atomic.Bool
	dials atomic.Int32
}

type cuttingConn struct {
	net.Conn
	d   *cutOnWrite
	cut atomic.Bool // set before the cutting write: nothing is read after it
}

// cutMessageID marks the publish whose write cuts the connection.
const cutMessageID = "cut-here"

func (d *cutOnWrite) dial(network, addr string) (net.Conn, error) {
	c, err := amqp.DefaultDial(5*time.Second)(network, addr)
	if err != nil {
		return nil, err
	}
	d.dials.Add(1)
	return &cuttingConn{Conn: c, d: d}, nil
}

func (c *cuttingConn) Write(p []byte) (int, error) {
	// Only the armed publish's own frames cut: a heartbeat written by the
	// library's own goroutine meanwhile must not use up the cut.
	cut := bytes.Contains(p, []byte(cutMessageID)) && c.d.armed.CompareAndSwap(true, false)
	if cut {
		// Closing right after the write is not enough: on a fast broker the
		// reader goroutine can take the confirm in between.
		c.cut.Store(true)
	}
	n, err := c.Conn.Write(p)
	if cut {
		_ = c.Conn.Close()
	}
	return n, err
}

// Read loses whatever arrives once the connection is being cut, the confirm
// of the cutting publish included.
func (c *cuttingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.cut.Load() {
		return 0, net.ErrClosed
	}
	return n, err
}

// A lost connection or a channel the broker closed (404 on a missing
// exchange) is "not confirmed": republished later, no retry used. Only a
// basic.return is "unroutable". The publisher recovers after each.
func TestAMQPPublisherTellsAClosedChannelFromAReturn(t *testing.T) {
	testenv.Integration(t)
	e := newTestEnv(t)
	unbound := testenv.NewExchange(t)
	d := &cutOnWrite{}
	pub := NewAMQPPublisher(testenv.AMQPURL, "inbox-publisher-test", d.dial)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	good := func(step string) {
		t.Helper()
		if err := pub.Publish(ctx, e.exchange, routingKey, amqp.Publishing{MessageId: step, Body: []byte("{}")}); err != nil {
			t.Fatalf("%s: a routable publish failed: %v", step, err)
		}
	}
	good("first")

	d.armed.Store(true)
	err := pub.Publish(ctx, e.exchange, routingKey, amqp.Publishing{MessageId: cutMessageID, Body: []byte("{}")})
	if err == nil || errors.Is(err, ErrUnroutable) || !errors.Is(err, errNotConfirmed) || !strings.Contains(err.Error(), "channel closed") {
		t.Fatalf("publish over a cut connection: %v, want not confirmed (channel closed), not unroutable", err)
	}
	good("after-cut")

	err = pub.Publish(ctx, testenv.UniqueName("inbox_missing"), routingKey, amqp.Publishing{MessageId: "missing", Body: []byte("{}")})
	if err == nil || errors.Is(err, ErrUnroutable) || !errors.Is(err, errNotConfirmed) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("publish to a missing exchange: %v, want not confirmed with the broker's 404, not unroutable", err)
	}
	good("after-404")

	err = pub.Publish(ctx, unbound, routingKey, amqp.Publishing{MessageId: "lost", Body: []byte("{}")})
	if !errors.Is(err, ErrUnroutable) {
		t.Fatalf("publish to an unbound exchange: %v, want ErrUnroutable", err)
	}
	good("after-return")
	if n := d.dials.Load(); n != 3 {
		t.Errorf("%d connections, want 3 (first, after the cut, after the 404 closed the channel)", n)
	}
}

// A republish whose channel the broker closes (missing exchange) gives the
// claim back without spending its last retry: the row is not FAILED.
func TestClosedChannelRepublishKeepsTheRetry(t *testing.T) {
	e := newParallelTestEnv(t)
	e.insertRow("no-exchange", StatusPendingRetry, 0, 1, "-1 SECOND", "0 SECOND")
	e.exec(`UPDATE consumer_message SET exchange = ?`, testenv.UniqueName("inbox_missing"))
	cfg := e.config()
	cfg.RetryBackoff = time.Millisecond
	cfg.RetryMaxBackoff = time.Millisecond
	r := e.newRetrier(t, cfg)
	if _, err := r.RunOnce(context.Background()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("RunOnce: %v, want the republish to fail with the broker's 404", err)
	}
	r0 := e.rows()[0]
	if r0.Status != StatusPendingRetry || r0.RetryCount != 0 {
		t.Errorf("row = %+v, want PENDING_RETRY with retry_count 0 (the retry is not used)", r0)
	}
}

package publisher

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/pkg/router"
	amqp "github.com/rabbitmq/amqp091-go"
)

// A broker in a memory or disk alarm blocks the connections that publish:
// it stops reading their socket but keeps sending heartbeats, so the
// connection never times out. The publisher's writes then wait in
// batchConn (maxPending), deep inside amqp091-go's PublishWithContext,
// which looks at its context only before it starts. A cancelled Run must
// still return promptly (SIGTERM during an alarm), with nothing reported
// confirmed; and the log says the broker blocked it, with its reason
// (connection.blocked). This runs the production dial (amqp091-go over a batchConn)
// against alarmBroker on 127.0.0.1.
func TestRunReturnsWhenCancelledDuringAResourceAlarm(t *testing.T) {
	url := alarmBroker(t)
	core, logs := observer.New(zap.InfoLevel)
	log := zaptest.NewLogger(t, zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, core) })))
	p, err := New(Config{URL: url}, log)
	if err != nil {
		t.Fatal(err)
	}
	// The default window (1024) of 64 KiB messages is 64 MiB: far more
	// than the kernel's socket buffers and maxPending hold.
	body := make([]byte, 64<<10)
	in := make(chan Job[string], 2048)
	out := make(chan Result[string], 2048)
	for i := range cap(in) {
		id := fmt.Sprintf("m-%04d", i+1)
		in <- Job[string]{Tag: id, Msg: &router.Message{RoutingKey: "q",
			Publishing: amqp.Publishing{MessageId: id, Body: body}}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Stream[string]{p}.Run(ctx, in, out) }()

	eventually(t, 20*time.Second, publishBlockedInWrite, "the publisher is not blocked in a write")
	const blocked = "broker blocked publishing (resource alarm)"
	eventually(t, 5*time.Second, func() bool { return logs.FilterMessage(blocked).Len() > 0 }, "no %q logged", blocked)
	if l := logs.FilterMessage(blocked).All(); len(l) != 1 || l[0].ContextMap()["reason"] != "low on memory" {
		t.Errorf("logged %v; want one %q with reason \"low on memory\"", l, blocked)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end while blocked in a write the broker does not read")
	}
	// The broker confirmed the first message only: no result may say
	// another was.
	close(out)
	for r := range out {
		if r.Job.Tag != "m-0001" || r.Err != nil {
			t.Errorf("a result for %s (err %v); the broker confirmed m-0001 only", r.Job.Tag, r.Err)
		}
	}
}

// publishBlockedInWrite reports whether a goroutine is in a publish that
// waits in batchConn.Write for room (the stack of one goroutine names
// both).
func publishBlockedInWrite() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "(*batchConn).Write") && strings.Contains(g, "sync.(*Cond).Wait") &&
			strings.Contains(g, "PublishWithContext") {
			return true
		}
	}
	return false
}

// alarmBroker is the least of an AMQP 0-9-1 server that amqp091-go will
// publish to, on 127.0.0.1: it opens the connection and channels and
// enables confirms. It routes and acks the first message (which the
// publisher sends alone, probe.go). At the next basic.publish it does what RabbitMQ does
// to a publishing connection during a resource alarm: it sends
// connection.blocked, stops reading the socket, and goes on sending
// heartbeats. It returns the URL.
func alarmBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if serveUntilPublish(c) == nil {
					heartbeat(c, stop)
				}
			}()
		}
	}()
	return "amqp://guest:guest@" + ln.Addr().String() + "/"
}

// serveUntilPublish answers the handshake, channel.open and confirm.select,
// acks the first publish, and at the second sends connection.blocked.
func serveUntilPublish(c net.Conn) error {
	if _, err := io.ReadFull(c, make([]byte, 8)); err != nil { // "AMQP" 0 0 9 1
		return err
	}
	send := func(ch uint16, class, method uint16, args ...byte) error {
		payload := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, class), method)
		_, err := c.Write(amqpFrame(1, ch, append(payload, args...)))
		return err
	}
	longstr := func(s string) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...) }
	// connection.start: version 0-9, no server properties, PLAIN, en_US.
	start := append([]byte{0, 9, 0, 0, 0, 0}, append(longstr("PLAIN"), longstr("en_US")...)...)
	if err := send(0, 10, 10, start...); err != nil {
		return err
	}
	acked := false
	for {
		typ, ch, payload, err := readAMQPFrame(c)
		if err != nil {
			return err
		}
		if typ == 3 && !acked { // the first publish's body: ack it (delivery tag 1)
			acked = true
			if err := send(1, 60, 80, 0, 0, 0, 0, 0, 0, 0, 1, 0); err != nil {
				return err
			}
		}
		if typ != 1 || len(payload) < 4 {
			continue // a heartbeat, or a publish's content
		}
		switch class, method := binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]); {
		case class == 10 && method == 11: // start-ok: tune (channel-max 2047, frame-max 128 KiB, heartbeat 10 s)
			err = send(0, 10, 30, 0x07, 0xff, 0, 2, 0, 0, 0, 10)
		case class == 10 && method == 40: // open: open-ok
			err = send(0, 10, 41, 0)
		case class == 20 && method == 10: // channel.open: open-ok
			err = send(ch, 20, 11, 0, 0, 0, 0)
		case class == 85 && method == 10: // confirm.select: select-ok
			err = send(ch, 85, 11)
		case class == 60 && method == 40 && !acked: // the first publish: taken
		case class == 60 && method == 40: // the second: the alarm
			reason := "low on memory"
			return send(0, 10, 60, append([]byte{byte(len(reason))}, reason...)...)
		}
		if err != nil {
			return err
		}
	}
}

// heartbeat sends a heartbeat frame every 200 ms until stop or a failed
// write: the broker is alive, it only reads nothing.
func heartbeat(c net.Conn, stop <-chan struct{}) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := c.Write(amqpFrame(8, 0, nil)); err != nil {
				return
			}
		}
	}
}

func amqpFrame(typ byte, ch uint16, payload []byte) []byte {
	f := append([]byte{typ}, binary.BigEndian.AppendUint16(nil, ch)...)
	f = binary.BigEndian.AppendUint32(f, uint32(len(payload)))
	return append(append(f, payload...), 0xce)
}

func readAMQPFrame(r io.Reader) (typ byte, ch uint16, payload []byte, err error) {
	var h [7]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	payload = make([]byte, binary.BigEndian.Uint32(h[3:])+1)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, 0, nil, err
	}
	if !bytes.HasSuffix(payload, []byte{0xce}) {
		return 0, 0, nil, errors.New("no frame-end octet")
	}
	return h[0], binary.BigEndian.Uint16(h[1:]), payload[:len(payload)-1], nil
}

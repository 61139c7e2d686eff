package faultproxy

import (
	"bufio"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// echo serves line echo on a loopback port until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// dialEcho opens a connection through p, closed when the test ends, and
// checks that msg comes back on it; when says when, for the failure.
func dialEcho(t *testing.T, p *Proxy, msg, when string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if got, err := roundTrip(c, msg); err != nil || got != msg+"\n" {
		t.Fatalf("%s: %q, %v", when, got, err)
	}
	return c
}

func TestCutResetsLiveAndNewConnectionsUntilRestore(t *testing.T) {
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c := dialEcho(t, p, "hello", "through the proxy")

	p.Cut()
	if _, err := roundTrip(c, "again"); err == nil {
		t.Fatal("a live connection still works after Cut")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if _, err := roundTrip(c2, "new"); err == nil {
			t.Fatal("a new connection works while cut")
		}
		c2.Close()
	}

	p.Restore()
	dialEcho(t, p, "back", "after Restore")
}

// A tap sees every byte a client sends, and what it writes is what the
// target gets.
func TestTapSeesWhatClientsSend(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	p, err := ListenTap(echo(t), func(server io.Writer, client io.Reader) {
		r := bufio.NewReader(client)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			mu.Lock()
			seen = append(seen, line)
			mu.Unlock()
			if _, err := io.WriteString(server, line); err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dialEcho(t, p, "hello", "through the tap")
	if got, err := roundTrip(c, "again"); err != nil || got != "again\n" {
		t.Fatalf("second line through the tap: %q, %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, "") != "hello\nagain\n" {
		t.Errorf("the tap saw %q, want hello and again", seen)
	}
	if _, err := ListenTap(echo(t), nil); err == nil {
		t.Error("ListenTap without a tap: no error")
	}
}

// CommandTap passes the client's packets on unchanged and notes the first
// bytes of each command (a packet with sequence id 0), not continuations.
func TestCommandTapNotesEachCommand(t *testing.T) {
	packet := func(seq byte, payload string) string {
		n := len(payload)
		return string([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}) + payload
	}
	var (
		mu    sync.Mutex
		noted []string
	)
	p, err := ListenTap(echo(t), CommandTap(8, func(payload []byte) {
		mu.Lock()
		defer mu.Unlock()
		noted = append(noted, string(payload))
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The echo server answers line by line: each packet ends in a newline.
	sent := packet(0, "\x03SELECT 1 FROM t\n") + packet(1, "more\n") + packet(0, "\x16SEL\n")
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, sent); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(sent))
	if _, err := io.ReadFull(c, back); err != nil || string(back) != sent {
		t.Fatalf("the server got %q, %v; want the packets unchanged %q", back, err, sent)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"\x03SELECT ", "\x16SEL\n"}; !slices.Equal(noted, want) {
		t.Fatalf("noted %q, want %q", noted, want)
	}
}

// A blackhole answers nothing and closes nothing: a live connection's
// write succeeds and its read times out (no RST, no EOF), a new connection
// is accepted and left unanswered; Restore lets what was held through on
// both, and the connections go on.
func TestBlackholeHoldsBytesWithoutClosingUntilRestore(t *testing.T) {
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dialEcho(t, p, "hello", "through the proxy")
	r := bufio.NewReader(c)

	p.Blackhole()
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatalf("write into the blackhole: %v, want it taken (nothing is closed)", err)
	}
	if line, err := r.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("read through the blackhole: %q, %v; want a timeout (no answer, no RST)", line, err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial during the blackhole: %v, want the connection accepted", err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(300 * time.Millisecond))
	_, _ = c2.Write([]byte("new\n"))
	r2 := bufio.NewReader(c2)
	if line, err := r2.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("a new connection during the blackhole read %q, %v; want a timeout", line, err)
	}
	if p.Live() != 1 {
		t.Errorf("%d live pairs during the blackhole, want the first one only (the new one is held before its dial)", p.Live())
	}

	p.Restore()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("after Restore the live connection read %q, %v; want the held line", line, err)
	}
	_ = c2.SetDeadline(time.Now().Add(2 * time.Second))
	if line, err := r2.ReadString('\n'); err != nil || line != "new\n" {
		t.Fatalf("after Restore the held connection read %q, %v; want its line answered", line, err)
	}
	if _, err := c.Write([]byte("more\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "more\n" {
		t.Fatalf("after Restore: %q, %v", line, err)
	}

	// Close ends the proxy even with copies held by a blackhole.
	p.Blackhole()
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return while blackholed")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

package publisher

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func TestBatchConnKeepsOrderAndCoalesces(t *testing.T) {
	client, server := net.Pipe()
	cc := &countingConn{Conn: client}
	b := newBatchConn(cc, nil)
	defer b.Close()

	const n = 2000
	var want bytes.Buffer
	for i := range n {
		fmt.Fprintf(&want, "frame %05d;", i)
	}
	got := make(chan []byte)
	go func() {
		buf := make([]byte, want.Len())
		// A slow reader: the first read waits, as a busy broker would.
		time.Sleep(50 * time.Millisecond)
		_, _ = io.ReadFull(server, buf)
		got <- buf
	}()
	for i := range n {
		if _, err := fmt.Fprintf(b, "frame %05d;", i); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	select {
	case buf := <-got:
		if !bytes.Equal(buf, want.Bytes()) {
			t.Fatalf("the bytes arrived changed or out of order")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not everything arrived within 10s")
	}
	if w := cc.writes.Load(); w >= n/10 {
		t.Fatalf("%d writes reached the socket for %d messages; want them coalesced (< %d)", w, n, n/10)
	}
}

func TestBatchConnLoneWriteGoesOutAtOnce(t *testing.T) {
	client, server := net.Pipe()
	b := newBatchConn(client, nil)
	defer b.Close()
	if _, err := b.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v; want the lone write delivered without a second one", buf, err)
	}
}

func TestBatchConnWriteErrorSurfaces(t *testing.T) {
	client, server := net.Pipe()
	b := newBatchConn(client, nil)
	defer b.Close()
	_ = server.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := b.Write([]byte("x"))
		if err != nil {
			if !errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("error %v; want the socket's own (io.ErrClosedPipe)", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("writes kept succeeding on a closed socket for 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBatchConnBlocksWhenThePeerStopsReading(t *testing.T) {
	client, server := net.Pipe() // nothing reads server
	defer server.Close()
	b := newBatchConn(client, nil)
	chunk := make([]byte, 1<<20)
	returned := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if _, err := b.Write(chunk); err != nil {
				returned <- err
				return
			}
			if i > 2*maxPending/len(chunk) {
				returned <- fmt.Errorf("wrote %d MiB with nobody reading", i+1)
				return
			}
		}
	}()
	select {
	case err := <-returned:
		t.Fatalf("Write did not block: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	_ = b.Close()
	select {
	case err := <-returned:
		if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("a Write blocked by a full buffer returned %v after Close; want a closed-connection error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Write blocked by a full buffer was not released by Close")
	}
}

// Writes that waited behind a peer that did not read (a broker
// blackholed, then the relay paused past its lease) are not sent once the
// guard fails: at most the chunk being written goes out, then the
// connection closes (issue 37, item 5).
func TestBatchConnGuardDropsWaitingWrites(t *testing.T) {
	client, server := net.Pipe() // nothing reads server yet: the flusher blocks
	defer server.Close()
	errLease := errors.New("the lease is lost")
	var lost atomic.Bool
	b := newBatchConn(client, func() error {
		if lost.Load() {
			return errLease
		}
		return nil
	})
	defer b.Close()
	msg := make([]byte, 1000)
	for range 200 { // 200 KB waiting, beyond one chunk
		if _, err := b.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	lost.Store(true)
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := io.Copy(io.Discard, server) // ends when the flusher closes the connection
	if n > writeChunk {
		t.Fatalf("%d bytes reached the peer after the guard failed; want at most the chunk in progress (%d)", n, writeChunk)
	}
	if _, err := b.Write(msg); !errors.Is(err, errLease) {
		t.Fatalf("a Write after the guard failed returned %v; want the guard's error", err)
	}
}

package publisher

import (
	"net"
	"sync"
	"time"
)

// batchConn coalesces the connection's writes. amqp091-go flushes every
// message on its own (method, header and body frames in one write), so a
// publisher that keeps a window of messages in flight pays one write
// system call per message: the largest single item in the relay's CPU
// profile while it drains a backlog. Here Write only appends to a buffer;
// one goroutine writes whatever has gathered, so while it is in a write
// call the next messages queue up behind it and leave in one call. A lone
// message is written at once: nothing waits for a batch to fill.
//
// A write that fails closes the connection; the next Write returns the
// error, and amqp091-go's reader sees the closed socket and ends the
// connection, which the publisher treats as any dropped connection
// (reconnect, republish what was not confirmed). Write blocks while
// maxPending bytes are waiting, so a broker that stops reading (flow
// control, a full socket) holds the publisher back as a plain socket would.
type batchConn struct {
	net.Conn
	// guard, when set, is asked before each chunk written: a publisher
	// whose lease ran out while its writes waited (a broker that did not
	// read, then the process paused) must not send them when it wakes. An
	// error closes the connection with the rest unwritten; the messages
	// are unconfirmed, and the new leader replays them.
	guard func() error

	mu      sync.Mutex
	cond    *sync.Cond // signalled when pending shrinks or err is set
	pending []byte
	spare   []byte
	err     error
	wake    wakeup        // the flusher has work
	done    chan struct{} // closed by Close
	once    sync.Once
}

const maxPending = 4 << 20

// writeChunk bounds each write system call, so the guard is asked again
// at least every this many bytes: a write blocked when the process was
// paused sends at most its rest when it wakes.
const writeChunk = 16 << 10

func newBatchConn(c net.Conn, guard func() error) *batchConn {
	b := &batchConn{Conn: c, guard: guard, wake: newWakeup(), done: make(chan struct{})}
	b.cond = sync.NewCond(&b.mu)
	go b.flush()
	return b
}

// wakeup tells one worker goroutine that there is work. notify never
// blocks, and the notifications that come while the worker is busy merge
// into one: each round the worker takes all the work there is.
type wakeup chan struct{}

func newWakeup() wakeup { return make(wakeup, 1) }

func (w wakeup) notify() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// wait blocks until a notification (true) or until stop is closed (false).
func (w wakeup) wait(stop <-chan struct{}) bool {
	select {
	case <-w:
		return true
	case <-stop:
		return false
	}
}

// batchDial is amqp.Config.Dial: a TCP connection with coalesced writes
// (TLS, when used, is layered on top by amqp091-go).
// guard (may be nil) is asked before each chunk written (batchConn.guard).
func batchDial(timeout time.Duration, guard func() error) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		// As amqp091-go's DefaultDial: a deadline for the TLS and AMQP
		// handshakes, which amqp091-go clears once the connection is open.
		if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
			_ = c.Close()
			return nil, err
		}
		return newBatchConn(c, guard), nil
	}
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	for b.err == nil && len(b.pending) > 0 && len(b.pending)+len(p) > maxPending {
		b.cond.Wait()
	}
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	b.pending = append(b.pending, p...)
	b.mu.Unlock()
	b.wake.notify()
	return len(p), nil
}

func (b *batchConn) flush() {
	for b.wake.wait(b.done) {
		b.mu.Lock()
		out := b.pending
		if len(out) == 0 {
			// A wake for bytes an earlier round took: keep both
			// buffers (swapping here would drop one, and the next
			// burst would grow a new one from nothing).
			b.mu.Unlock()
			continue
		}
		b.pending, b.spare = b.spare[:0], nil
		b.mu.Unlock()
		err := b.write(out)
		b.mu.Lock()
		if err != nil && b.err == nil {
			b.err = err
		}
		if cap(out) <= maxPending { // keep the buffer unless one huge message grew it
			b.spare = out[:0]
		}
		b.cond.Broadcast()
		b.mu.Unlock()
		if err != nil {
			_ = b.Conn.Close()
			return
		}
	}
}

// write writes out in chunks, asking the guard before each.
func (b *batchConn) write(out []byte) error {
	for len(out) > 0 {
		if b.guard != nil {
			if err := b.guard(); err != nil {
				return err
			}
		}
		n := min(len(out), writeChunk)
		if _, err := b.Conn.Write(out[:n]); err != nil {
			return err
		}
		out = out[n:]
	}
	return nil
}

// Close stops the flusher and closes the socket; anything not yet written
// is dropped, as it would be on a socket closed mid-write.
func (b *batchConn) Close() error {
	b.once.Do(func() {
		close(b.done)
		b.mu.Lock()
		if b.err == nil {
			b.err = net.ErrClosed
		}
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	return b.Conn.Close()
}

// Package faultproxy is a loopback TCP proxy for tests that need a server to
// "go away" without touching the shared server itself: put the proxy between
// the relay and the server, Cut it, Restore it. Cut resets every live
// connection (RST, so the client notices at once instead of waiting for a
// heartbeat) and resets new ones as they arrive, which is what a client sees
// of a crashed server or one behind a firewall that rejects. Blackhole is the
// firewall that drops instead: nothing crosses and nothing is closed, so a
// client learns of it only by its own timeouts. ListenTLS also terminates TLS, so a
// plain-TCP server can stand behind a TLS client; ListenTap lets the test
// watch what clients send (count a protocol's commands, say).
package faultproxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections on a loopback port to a target address.
type Proxy struct {
	target string
	ln     net.Listener
	tls    *tls.Config
	tap    Tap

	mu     sync.Mutex
	cut    bool
	closed bool
	// open is closed while bytes may cross; Blackhole replaces it with an
	// open channel, which every copy waits on.
	open  chan struct{}
	conns map[net.Conn]struct{} // both ends of every live pair
	wg    sync.WaitGroup
	// accepted counts every connection a client opened through the proxy,
	// refused ones included: how often a client dialled.
	accepted atomic.Int64
}

// Listen starts a proxy on 127.0.0.1 (a free port) forwarding to target.
func Listen(target string) (*Proxy, error) { return listen(target, nil, nil) }

// Tap copies what a client sends on to the target, in place of the plain
// copy, so that it sees the stream as it passes. It returns once reading
// from client or writing to server fails; the proxy then ends the pair.
type Tap func(server io.Writer, client io.Reader)

// ListenTap is Listen with tap copying each client's bytes to the target.
func ListenTap(target string, tap Tap) (*Proxy, error) {
	if tap == nil {
		return nil, errors.New("faultproxy: ListenTap needs a Tap")
	}
	return listen(target, nil, tap)
}

// ListenTLS is Listen with TLS terminated at the proxy: clients speak TLS to
// it (with cfg's certificate), the target gets plain TCP.
func ListenTLS(target string, cfg *tls.Config) (*Proxy, error) {
	if cfg == nil {
		return nil, errors.New("faultproxy: ListenTLS needs a tls.Config")
	}
	return listen(target, cfg, nil)
}

func listen(target string, cfg *tls.Config, tap Tap) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, tls: cfg, tap: tap, conns: map[net.Conn]struct{}{}, open: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Cut resets every live connection and every new one until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	live := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		live = append(live, c)
	}
	p.mu.Unlock()
	for _, c := range live {
		reset(c)
	}
}

// Blackhole stops every byte in both directions, of live connections and
// of new ones, without closing anything: the peers get no RST and no
// answer, as behind a firewall that drops packets, and find out only by
// their own timeouts (a heartbeat, a confirm deadline). New connections are
// accepted (the kernel answers the handshake on loopback) and held
// unanswered. Restore lets what was held through, on the connections that
// are still open.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already blackholed
	}
}

// Restore lets connections through again, after Cut or Blackhole.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.lift()
}

// lift ends a blackhole.
func (p *Proxy) lift() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// wait returns once bytes may cross.
func (p *Proxy) wait() {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	<-open
}

// gated is a reader that holds what it reads while the proxy is
// blackholed, and does not read meanwhile.
type gated struct {
	r io.Reader
	p *Proxy
}

func (g gated) Read(b []byte) (int, error) {
	g.p.wait()
	n, err := g.r.Read(b)
	if n > 0 {
		g.p.wait() // read just before the blackhole began: held, as in flight
	}
	return n, err
}

// Live is the number of proxied connections open now.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Accepted is the number of connections clients opened through the proxy
// since it started, refused ones included.
func (p *Proxy) Accepted() int { return int(p.accepted.Load()) }

// Close stops the proxy and resets every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.lift() // copies held by a blackhole find their connections reset
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		refuse := p.cut || p.closed
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.wait() // a blackhole holds a new connection unanswered
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(client)
		return
	}
	if !p.track(client, server) {
		reset(client)
		reset(server)
		return
	}
	defer p.untrack(client, server)
	var front io.ReadWriter = client
	if p.tls != nil {
		tc := tls.Server(client, p.tls)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			// The client refused our certificate (or offered none when one
			// is required): it reports why; nothing to forward.
			reset(client)
			reset(server)
			return
		}
		_ = tc.SetDeadline(time.Time{})
		front = tc
	}
	from := gated{r: front, p: p}
	up := func() { _, _ = io.Copy(server, from) }
	if p.tap != nil {
		up = func() { p.tap(server, from) }
	}
	done := make(chan struct{}, 2)
	go func() { up(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(front, gated{r: server, p: p}); done <- struct{}{} }()
	<-done
	// One side ended: end the other, so neither waits on a half-open pair.
	reset(client)
	reset(server)
	<-done
}

func (p *Proxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		return false
	}
	p.conns[a], p.conns[b] = struct{}{}, struct{}{}
	return true
}

func (p *Proxy) untrack(a, b net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, a)
	delete(p.conns, b)
}

// reset closes with SO_LINGER 0, so the peer gets an RST: a read or write on
// the other side fails at once rather than after a timeout.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

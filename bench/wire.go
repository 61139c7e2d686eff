package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
)

// wireProxy is a TCP proxy in front of the primary for the contenders (the
// relay's primary connection, the poller's). It counts the MySQL commands
// that pass through it, so a contender's statements are known exactly even
// when other clients use the primary at the same time; the primary's global
// counters (the measure) are checked against it.
//
// The MySQL client protocol frames every packet with a 3-byte length and a
// sequence number; a packet with sequence 0 from the client starts a new
// command, whose first byte says which
// (https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_packets.html).
// TLS and compression would hide that; the bench uses neither.
type wireProxy struct {
	ln     net.Listener
	target string
	n      stmtCount
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

const (
	comQuery       = 0x03
	comStmtExecute = 0x17
)

func startWireProxy(target string) (*wireProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &wireProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// hostPort is where contenders connect instead of the primary.
func (p *wireProxy) hostPort() (string, int) {
	a := p.ln.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

func (p *wireProxy) addr() string {
	h, port := p.hostPort()
	return net.JoinHostPort(h, strconv.Itoa(port))
}

func (p *wireProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(c, s)
			_ = c.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.forward(s, c)
			_ = s.Close()
			p.untrack(c, s)
		}()
	}
}

func (p *wireProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *wireProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// forward copies client packets to the server, counting commands.
func (p *wireProxy) forward(dst io.Writer, src net.Conn) {
	r := bufio.NewReaderSize(src, 64<<10)
	w := bufio.NewWriterSize(dst, 64<<10)
	var head [4]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		n := int(head[0]) | int(head[1])<<8 | int(head[2])<<16
		if _, err := w.Write(head[:]); err != nil {
			return
		}
		if head[3] == 0 && n > 0 {
			peek, err := r.Peek(min(n, 16))
			if err != nil {
				return
			}
			switch peek[0] {
			case comQuery:
				p.n.note(string(peek[1:]))
			case comStmtExecute:
				p.n.questions.Add(1)
			}
		}
		if _, err := io.CopyN(w, r, int64(n)); err != nil {
			return
		}
		// Flush at the end of what the client has sent so far: a command
		// is never held back waiting for more input.
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

func (p *wireProxy) close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

package main

import (
	"bufio"
	"io"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
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
	proxy *faultproxy.Proxy // with forward as its tap
	n     stmtCount
}

const (
	comQuery       = 0x03
	comStmtExecute = 0x17
)

func startWireProxy(target string) (*wireProxy, error) {
	p := &wireProxy{}
	proxy, err := faultproxy.ListenTap(target, p.forward)
	if err != nil {
		return nil, err
	}
	p.proxy = proxy
	return p, nil
}

// hostPort is where contenders connect instead of the primary.
func (p *wireProxy) hostPort() (string, int) { return "127.0.0.1", p.proxy.Port() }

func (p *wireProxy) addr() string { return p.proxy.Addr() }

// forward copies client packets to the server, counting commands.
func (p *wireProxy) forward(dst io.Writer, src io.Reader) {
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

func (p *wireProxy) close() error { return p.proxy.Close() }

package main

import (
	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
)

// wireProxy is a TCP proxy in front of the primary for the contenders (the
// relay's primary connection, the poller's). It counts the MySQL commands
// that pass through it (faultproxy.CommandTap), so a contender's statements
// are known exactly even when other clients use the primary at the same
// time; the primary's global counters (the measure) are checked
// against it. TLS and compression would hide the commands; the bench uses
// neither.
type wireProxy struct {
	proxy *faultproxy.Proxy // with note on its command tap
	n     stmtCount
}

const (
	comQuery       = 0x03
	comStmtExecute = 0x17
)

func startWireProxy(target string) (*wireProxy, error) {
	p := &wireProxy{}
	proxy, err := faultproxy.ListenTap(target, faultproxy.CommandTap(16, p.note))
	if err != nil {
		return nil, err
	}
	p.proxy = proxy
	return p, nil
}

// hostPort is where contenders connect instead of the primary.
func (p *wireProxy) hostPort() (string, int) { return "127.0.0.1", p.proxy.Port() }

func (p *wireProxy) addr() string { return p.proxy.Addr() }

// note counts one command.
func (p *wireProxy) note(payload []byte) {
	switch payload[0] {
	case comQuery:
		p.n.note(string(payload[1:]))
	case comStmtExecute:
		p.n.questions.Add(1)
	}
}

func (p *wireProxy) close() error { return p.proxy.Close() }

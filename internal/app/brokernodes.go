package app

// The broker's nodes (broker.urls): which one each lane is on, for
// /readyz and binlog_relay_broker_node_info; and a probe of each, for
// check and status (internal/command prints it, Env.ProbeBroker). URLs are
// always shown with the password redacted.

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// nodeLane is a lane that says which broker node it is on (an AMQP
// publisher; a stream lane does not).
type nodeLane interface{ Node() string }

// connectedNodes are the nodes the connected lanes are on, each once, in
// lane order.
func (ps publishers) connectedNodes() []string {
	var out []string
	for _, p := range ps {
		if n, ok := p.(nodeLane); ok && p.Connected() && !slices.Contains(out, n.Node()) {
			out = append(out, n.Node())
		}
	}
	return out
}

// downNodes names the nodes the lanes that are not connected are dialling
// (or last dialled), each once; cfg's first URL for a lane that does not
// say.
func (ps publishers) downNodes(cfg config.Broker) []string {
	var out []string
	for _, p := range ps {
		if p.Connected() {
			continue
		}
		node := publisher.Redact(cfg.FirstURL())
		if n, ok := p.(nodeLane); ok {
			node = n.Node()
		}
		if !slices.Contains(out, node) {
			out = append(out, node)
		}
	}
	return out
}

// brokerDownReason is /readyz's reason when a lane is not connected.
func (a *App) brokerDownReason(p *publishers) string {
	why := "broker " + strings.Join(p.downNodes(a.Cfg.Broker), ", ") + " is not connected"
	if n := len(a.Cfg.Broker.Nodes()); n > 1 {
		why += fmt.Sprintf(" (dialling the %d nodes of broker.urls in turn)", n)
	}
	return why
}

// nodeProbe is what one dial of a broker node found.
type nodeProbe struct {
	url     string // redacted
	err     error  // scrubbed of the password
	version string
	cluster string
}

// probeBrokerNodes dials every node of the broker config once, each
// within timeout, in parallel.
func probeBrokerNodes(ctx context.Context, b config.Broker, btls *tls.Config, timeout time.Duration) []nodeProbe {
	nodes := b.Nodes()
	out := make([]nodeProbe, len(nodes))
	done := make(chan struct{}, len(nodes))
	for i, raw := range nodes {
		go func() {
			defer func() { done <- struct{}{} }()
			out[i] = probeNode(raw, btls, timeout)
		}()
	}
	for range nodes {
		select {
		case <-done:
		case <-ctx.Done():
			return out[:0]
		}
	}
	return out
}

func probeNode(raw string, btls *tls.Config, timeout time.Duration) nodeProbe {
	p := nodeProbe{url: publisher.Redact(raw)}
	conn, err := amqp.DialConfig(raw, amqp.Config{TLSClientConfig: btls, Dial: amqp.DefaultDial(timeout)})
	if err != nil {
		p.err = publisher.Scrub(err, raw)
		return p
	}
	p.version, _ = conn.Properties["version"].(string)
	p.cluster, _ = conn.Properties["cluster_name"].(string)
	_ = conn.Close()
	return p
}

// checkBroker dials each broker node: one that does not answer is a
// warning while another does (the publishers move on to it), and an error
// when none does.
func (c *checker) checkBroker(ctx context.Context) {
	a := c.a
	btls, err := a.Cfg.Broker.TLSConfig()
	if err != nil {
		c.add(Error, "broker", "%v", err)
		return
	}
	probes := probeBrokerNodes(ctx, a.Cfg.Broker, btls, 5*time.Second)
	up := 0
	for _, p := range probes {
		if p.err == nil {
			up++
		}
	}
	for _, p := range probes {
		switch {
		case p.err == nil:
		case up == 0:
			c.add(Error, "broker "+p.url, "cannot connect: %v", p.err)
		default:
			c.add(Warning, "broker "+p.url, "cannot connect: %v (the relay uses the other nodes of broker.urls: %d of %d answer)", p.err, up, len(probes))
		}
	}
	if up > 0 && a.Cfg.Broker.Stream.Enabled() {
		if _, err := a.checkStreamPort(ctx); err != nil { // streams.go
			c.add(Error, "broker.stream "+a.Cfg.Broker.Stream.Name, "the stream port does not answer: %v", err)
		}
	}
}

package preflight

// The broker's nodes (broker.urls): a probe of each, for check and for
// status (internal/command/brokers.go). URLs are always shown with the
// password redacted.

import (
	"context"
	"crypto/tls"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// NodeProbe is what one dial of a broker node found.
type NodeProbe struct {
	URL     string // redacted
	Err     error  // scrubbed of the password
	Version string
	Cluster string
}

// ProbeBrokerNodes dials every node of the broker config once, each
// within timeout, in parallel.
func ProbeBrokerNodes(ctx context.Context, b config.Broker, btls *tls.Config, timeout time.Duration) []NodeProbe {
	nodes := b.Nodes()
	out := make([]NodeProbe, len(nodes))
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

func probeNode(raw string, btls *tls.Config, timeout time.Duration) NodeProbe {
	p := NodeProbe{URL: publisher.Redact(raw)}
	conn, err := amqp.DialConfig(raw, amqp.Config{TLSClientConfig: btls, Dial: amqp.DefaultDial(timeout)})
	if err != nil {
		p.Err = publisher.Scrub(err, raw)
		return p
	}
	p.Version, _ = conn.Properties["version"].(string)
	p.Cluster, _ = conn.Properties["cluster_name"].(string)
	_ = conn.Close()
	return p
}

// checkBroker dials each broker node: one that does not answer is a
// warning while another does (the publishers move on to it), and an error
// when none does.
func (c *checker) checkBroker(ctx context.Context) {
	s := c.s
	btls, err := s.Config.Broker.TLSConfig()
	if err != nil {
		c.add(Error, "broker", "%v", err)
		return
	}
	probes := ProbeBrokerNodes(ctx, s.Config.Broker, btls, 5*time.Second)
	up := 0
	for _, p := range probes {
		if p.Err == nil {
			up++
		}
	}
	for _, p := range probes {
		switch {
		case p.Err == nil:
		case up == 0:
			c.add(Error, "broker "+p.URL, "cannot connect: %v", p.Err)
		default:
			c.add(Warning, "broker "+p.URL, "cannot connect: %v (the relay uses the other nodes of broker.urls: %d of %d answer)", p.Err, up, len(probes))
		}
	}
	if up > 0 && s.Config.Broker.Stream.Enabled() {
		if _, err := s.StreamPort(ctx); err != nil {
			c.add(Error, "broker.stream "+s.Config.Broker.Stream.Name, "the stream port does not answer: %v", err)
		}
	}
}

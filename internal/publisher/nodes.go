package publisher

// Several nodes of one RabbitMQ cluster (Config.URLs). The publisher keeps
// one connection at a time and moves on only when it fails: every redial
// follows a lost connection or a failed dial, and goes to the node after
// the one that failed, so a node stopped for maintenance is left at once
// and the others are tried in turn, wrapping around. Nothing else changes:
// the unconfirmed messages are republished in order on the new connection,
// as after a reconnect to the same node. A queue's messages live on its
// members, not on the node a client is connected to (quorum queues
// replicate them; https://www.rabbitmq.com/docs/quorum-queues), so any node
// of the cluster takes the publishes.

import (
	"errors"
	"fmt"
	"net/url"
)

// Nodes are the broker URLs the publisher dials in turn: URLs, or URL
// alone.
func (c *Config) Nodes() []string {
	if len(c.URLs) > 0 {
		return c.URLs
	}
	if c.URL == "" {
		return nil
	}
	return []string{c.URL}
}

// Node is the broker node (its URL, password redacted) the publisher is
// connected to, or when it is not, the one it is dialling or last dialled.
// Before the first dial it is the first node.
func (p *Publisher) Node() string {
	if n := p.node.Load(); n != nil {
		return *n
	}
	if nodes := p.cfg.Nodes(); len(nodes) > 0 {
		return Redact(nodes[0])
	}
	return ""
}

// pickNode returns the URL to dial: the node the last Run ended on for a
// machine's first dial, else the one after the node that failed.
func (l *link) pickNode() string {
	nodes := l.cfg.Nodes()
	if l.dialled {
		l.node = (l.node + 1) % len(nodes)
	}
	l.dialled = true
	l.p.nodeAt.Store(int32(l.node))
	red := Redact(nodes[l.node])
	l.p.node.Store(&red)
	return nodes[l.node]
}

// validateNodes checks broker.url and broker.urls: one of them, each an
// amqp:// or amqps:// URL with a host, all of one scheme (broker.tls
// applies to all). No error shows a URL: it may hold a password.
func (c *Config) validateNodes() []error {
	var errs []error
	switch {
	case c.URL != "" && len(c.URLs) > 0:
		errs = append(errs, errors.New("broker.urls: set broker.url (one node) or broker.urls (the nodes of one cluster), not both"))
	case c.URL == "" && len(c.URLs) == 0:
		errs = append(errs, errors.New("broker.url: required (or broker.urls, the nodes of one cluster)"))
	}
	if c.URL != "" {
		if err := checkAMQPURL(c.URL); err != nil {
			errs = append(errs, fmt.Errorf("broker.url: %w", err))
		}
	}
	seen := map[string]int{}
	for i, raw := range c.URLs {
		if err := checkAMQPURL(raw); err != nil {
			errs = append(errs, fmt.Errorf("broker.urls[%d]: %w", i, err))
			continue
		}
		if j, dup := seen[raw]; dup {
			errs = append(errs, fmt.Errorf("broker.urls[%d]: the same URL as broker.urls[%d]", i, j))
		}
		seen[raw] = i
		if urlScheme(raw) != urlScheme(c.URLs[0]) {
			errs = append(errs, fmt.Errorf("broker.urls[%d]: %s:// where broker.urls[0] is %s://: broker.tls applies to every node", i, urlScheme(raw), urlScheme(c.URLs[0])))
		}
	}
	return errs
}

func checkAMQPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return errors.New("must start with amqp:// or amqps://")
	}
	if u.Host == "" {
		return errors.New("has no host")
	}
	return nil
}

func urlScheme(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Scheme
}

package config

import "fmt"

// broker.url or broker.urls: one RabbitMQ node, or the nodes of one
// cluster, which the publishers dial in turn (internal/publisher/nodes.go).
// One URL with several comma-separated hosts is not taken: a list says the
// same without a syntax of its own.

// Nodes are the broker URLs: broker.urls, or broker.url alone (nil when
// neither is set).
func (b Broker) Nodes() []string {
	if len(b.URLs) > 0 {
		return b.URLs
	}
	if b.URL == "" {
		return nil
	}
	return []string{b.URL}
}

// FirstURL is the first node: what the management API URL, the stream URI
// and anything else that needs one broker address is derived from.
func (b Broker) FirstURL() string {
	if n := b.Nodes(); len(n) > 0 {
		return n[0]
	}
	return ""
}

// setPassword puts broker.password_file's password into every URL.
func (b *Broker) setPassword(pw string) error {
	if b.URL != "" {
		u, err := withPassword(b.URL, pw)
		if err != nil {
			return fmt.Errorf("broker.url: %w", err)
		}
		b.URL = u
	}
	for i, raw := range b.URLs {
		u, err := withPassword(raw, pw)
		if err != nil {
			return fmt.Errorf("broker.urls[%d]: %w", i, err)
		}
		b.URLs[i] = u
	}
	return nil
}

// urlPasswords are the passwords in the URLs, which no error may show.
func (b Broker) urlPasswords() []string {
	var out []string
	for _, u := range append([]string{b.URL}, b.URLs...) {
		if pw := urlPassword(u); pw != "" {
			out = append(out, pw)
		}
	}
	return out
}

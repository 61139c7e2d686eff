package config

import (
	"errors"
	"fmt"
	"net/url"
)

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

// validateURLs checks broker.url and broker.urls: one of them, each an
// amqp:// or amqps:// URL with a host, all of one scheme (broker.tls
// applies to all).
func (b Broker) validateURLs() []error {
	var errs []error
	switch {
	case b.URL != "" && len(b.URLs) > 0:
		errs = append(errs, errors.New("broker.urls: set broker.url (one node) or broker.urls (the nodes of one cluster), not both"))
	case b.URL == "" && len(b.URLs) == 0:
		errs = append(errs, errors.New("broker.url: required (or broker.urls, the nodes of one cluster)"))
	}
	if b.URL != "" {
		if err := checkAMQPURL(b.URL); err != nil {
			errs = append(errs, fmt.Errorf("broker.url: %w", err))
		}
	}
	seen := map[string]int{}
	for i, raw := range b.URLs {
		if err := checkAMQPURL(raw); err != nil {
			errs = append(errs, fmt.Errorf("broker.urls[%d]: %w", i, err))
			continue
		}
		if j, dup := seen[raw]; dup {
			errs = append(errs, fmt.Errorf("broker.urls[%d]: the same URL as broker.urls[%d]", i, j))
		}
		seen[raw] = i
		if urlScheme(raw) != urlScheme(b.URLs[0]) {
			errs = append(errs, fmt.Errorf("broker.urls[%d]: %s:// where broker.urls[0] is %s://: broker.tls applies to every node", i, urlScheme(raw), urlScheme(b.URLs[0])))
		}
	}
	return errs
}

func urlScheme(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Scheme
}

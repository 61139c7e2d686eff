package streamlane

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// Config is the stream, the producer name that deduplicates, and the
// confirm window. Errors name the field by its YAML key under stream:.
type Config struct {
	// URIs of the broker's stream port, tried in order:
	// rabbitmq-stream://user:password@host:5552/vhost, or
	// rabbitmq-stream+tls:// (with TLS, or the system roots without it).
	URIs []string
	TLS  *tls.Config
	// Stream is declared when missing, with MaxLengthBytes and MaxAge (in
	// whole seconds); a stream already there is used as it is.
	Stream         string
	MaxLengthBytes int64
	MaxAge         time.Duration
	// ProducerName is the name the broker deduplicates by: the same on
	// every run, and used by no other producer on the stream.
	ProducerName string
	// Window bounds the messages published and not yet confirmed.
	Window int
	// ConfirmTimeout: a message not confirmed within it fails the lane.
	ConfirmTimeout time.Duration
	// ConnectTimeout bounds each step of opening (connecting, declaring
	// the stream, declaring the producer) and of closing.
	ConnectTimeout time.Duration
	// MaxFrameBytes is the frame size asked of the broker (which may
	// lower it: RabbitMQ's stream.frame_max, 1 MiB by default). A message
	// that cannot fit in one frame is refused before it is sent.
	MaxFrameBytes int
	// DialAdvertised dials the host and port the broker advertises for the
	// stream's leader (a cluster whose nodes are reachable by their
	// advertised names). Without it, the default, everything goes to the
	// host and port of the URI that answered: one node, or a load balancer
	// in front of a cluster, whatever the broker advertises.
	DialAdvertised bool
	// ConnectionName shows in the RabbitMQ management UI.
	ConnectionName string
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	c.Window = cmp.Or(c.Window, 1000)
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, 30*time.Second)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, 10*time.Second)
	c.MaxFrameBytes = cmp.Or(c.MaxFrameBytes, 1<<20)
	c.ConnectionName = cmp.Or(c.ConnectionName, "binlog-relay")
}

// maxWindow keeps the client's own queue (twice the window) under its
// limit of 1,000,000.
const maxWindow = 100_000

// maxNameLen: stream names and producer names are short strings of the
// stream protocol; RabbitMQ takes up to 255 bytes of either.
const maxNameLen = 255

// Validate reports every bad field; it expects Defaults to have filled the
// zero ones. Errors never carry a URI's password.
func (c *Config) Validate() error {
	var errs []error
	if len(c.URIs) == 0 {
		errs = append(errs, errors.New("stream.uris: required (rabbitmq-stream://user:password@host:5552/)"))
	}
	for i, raw := range c.URIs {
		if _, err := parseURI(raw); err != nil {
			errs = append(errs, fmt.Errorf("stream.uris[%d]: %w", i, err))
		}
	}
	if c.Stream == "" {
		errs = append(errs, errors.New("stream.name: required"))
	} else if len(c.Stream) > maxNameLen {
		errs = append(errs, fmt.Errorf("stream.name: %d bytes, at most %d", len(c.Stream), maxNameLen))
	}
	if c.ProducerName == "" {
		errs = append(errs, errors.New("stream.producer_name: required (the broker deduplicates by it)"))
	} else if len(c.ProducerName) > maxNameLen {
		errs = append(errs, fmt.Errorf("stream.producer_name: %d bytes, at most %d", len(c.ProducerName), maxNameLen))
	}
	if c.Window < 1 || c.Window > maxWindow {
		errs = append(errs, fmt.Errorf("stream.window: %d must be between 1 and %d", c.Window, maxWindow))
	}
	if c.ConfirmTimeout <= 0 {
		errs = append(errs, fmt.Errorf("stream.confirm_timeout: %s must be positive", c.ConfirmTimeout))
	}
	if c.ConnectTimeout <= 0 {
		errs = append(errs, fmt.Errorf("stream.connect_timeout: %s must be positive", c.ConnectTimeout))
	}
	if c.MaxFrameBytes < 4096 {
		errs = append(errs, fmt.Errorf("stream.max_frame_bytes: %d must be at least 4096", c.MaxFrameBytes))
	}
	if c.MaxLengthBytes < 0 {
		errs = append(errs, fmt.Errorf("stream.max_length_bytes: %d must not be negative (0: no limit)", c.MaxLengthBytes))
	}
	if c.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("stream.max_age: %s must not be negative (0: no limit)", c.MaxAge))
	}
	return errors.Join(errs...)
}

// endpoint is a URI's address, for the address resolver.
type endpoint struct {
	host string
	port int
}

// parseURI checks a stream URI; its errors never quote the URI.
func parseURI(raw string) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, errors.New("not a URL")
	}
	if u.Scheme != "rabbitmq-stream" && u.Scheme != "rabbitmq-stream+tls" {
		return endpoint{}, fmt.Errorf("%s is not a rabbitmq-stream:// or rabbitmq-stream+tls:// URL", publisher.Redact(raw))
	}
	if u.Hostname() == "" {
		return endpoint{}, fmt.Errorf("%s has no host", publisher.Redact(raw))
	}
	// The client takes one path segment as the virtual host ("/" or none:
	// the default one).
	if vhost := strings.TrimPrefix(u.Path, "/"); vhost != "/" && strings.Contains(vhost, "/") {
		return endpoint{}, fmt.Errorf("%s: the path is the virtual host, one segment (%%2F for a /)", publisher.Redact(raw))
	}
	port := 5552 // the client's default too
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return endpoint{}, fmt.Errorf("%s: bad port", publisher.Redact(raw))
		}
	}
	return endpoint{host: u.Hostname(), port: port}, nil
}

// addr is host:port.
func (e endpoint) addr() string { return net.JoinHostPort(e.host, strconv.Itoa(e.port)) }

// passwords are the URIs' passwords, for scrub.
func passwords(uris []string) []string {
	var out []string
	for _, raw := range uris {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			continue
		}
		if pw, has := u.User.Password(); has && pw != "" {
			out = append(out, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
	}
	return out
}

// scrubbed is an error whose text has the passwords cut out; errors.Is
// still sees the error inside.
type scrubbed struct {
	err     error
	secrets []string
}

func (s scrubbed) Error() string { return scrubText(s.err.Error(), s.secrets) }
func (s scrubbed) Unwrap() error { return s.err }

// scrub makes sure err never shows a password: the client's own errors
// may quote a URI (url.Parse does).
func scrub(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	return scrubbed{err: err, secrets: secrets}
}

func scrubText(s string, secrets []string) string {
	for _, pw := range secrets {
		if pw != "" {
			s = strings.ReplaceAll(s, pw, "xxxxx")
		}
	}
	return s
}

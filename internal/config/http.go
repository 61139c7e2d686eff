package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// DefaultHTTPAddr is where /metrics, /healthz and /readyz listen when
// http.addr is not set: loopback only, so nothing is exposed by default.
const DefaultHTTPAddr = "127.0.0.1:9464"

// HTTP configures the metrics and health endpoints (see internal/app/http.go)
// and what feeds the metrics that need a query of their own.
type HTTP struct {
	// Addr is where /metrics, /healthz and /readyz listen. Unset means
	// DefaultHTTPAddr; "" or "off" turns the server (and the backlog and
	// queue pollers) off.
	Addr *string `yaml:"addr"`
	// ReadyMaxLag is the binlog lag above which /readyz says not ready
	// (default 30s).
	ReadyMaxLag time.Duration `yaml:"ready_max_lag"`
	// BacklogInterval is how often the outbox backlog is counted on the
	// replica (default 15s).
	BacklogInterval time.Duration `yaml:"backlog_interval"`
	// RetryRatioInterval is how often the retry ratio is computed (default
	// 1m, never more often than the backlog): it reads every row updated in
	// the last hour, which costs more than the counts.
	RetryRatioInterval time.Duration `yaml:"retry_ratio_interval"`
	// Queues are RabbitMQ queues whose depth is read from the management API
	// (none by default, which turns the queue poller off).
	Queues []string `yaml:"queues"`
	// VHost of those queues (default "/").
	VHost string `yaml:"vhost"`
	// ManagementURL is the RabbitMQ management API, e.g.
	// "http://monitor:${RABBIT_MONITOR_PASSWORD}@rabbit:15672". By default it
	// is derived from broker.url: same host and credentials, port 15672,
	// https when the broker URL is amqps.
	ManagementURL string `yaml:"management_url"`
	// QueueInterval is how often queue depth is read (default 15s).
	QueueInterval time.Duration `yaml:"queue_interval"`
	// Console serves the operator's console at /ui on this port (off by
	// default; docs/console.md). Without ConsoleToken it is read-only.
	Console bool `yaml:"console"`
	// ConsoleToken lets whoever signs in with it act (requeue, replay);
	// ConsoleTokenFile reads it from a file instead. Neither set: the
	// console only shows.
	ConsoleToken     string `yaml:"console_token"`
	ConsoleTokenFile string `yaml:"console_token_file"`
	// ConsolePayloads shows the rows' payloads on the failures page (off:
	// a payload may hold personal data).
	ConsolePayloads bool `yaml:"console_payloads"`
}

// MinConsoleToken is the shortest http.console_token taken: it is the
// only thing between a browser and the requeue and replay buttons.
const MinConsoleToken = 16

// ListenAddr is the address to serve on; explicit tells whether the config
// named it (a taken default port is then not fatal). An empty addr means off.
func (h HTTP) ListenAddr() (addr string, explicit bool) {
	if h.Addr == nil {
		return DefaultHTTPAddr, false
	}
	a := strings.TrimSpace(*h.Addr)
	if strings.EqualFold(a, "off") {
		return "", true
	}
	return a, true
}

// defaults fills the section's unset fields: the relay's readiness and its
// metric pollers read them as they are.
func (h *HTTP) defaults() {
	h.ReadyMaxLag = cmp.Or(h.ReadyMaxLag, 30*time.Second)
	h.BacklogInterval = cmp.Or(h.BacklogInterval, 15*time.Second)
	h.RetryRatioInterval = cmp.Or(h.RetryRatioInterval, time.Minute)
	h.QueueInterval = cmp.Or(h.QueueInterval, 15*time.Second)
	h.VHost = cmp.Or(h.VHost, "/")
}

// Management returns the management API URL (with credentials): the
// configured one, or one derived from the broker URL.
func (h HTTP) Management(brokerURL string) (string, error) {
	if h.ManagementURL != "" {
		return h.ManagementURL, nil
	}
	u, err := url.Parse(brokerURL)
	if err != nil || u.Host == "" {
		return "", errors.New("http.management_url: not set, and broker.url gives no host to derive it from")
	}
	m := &url.URL{Scheme: "http", Host: net.JoinHostPort(u.Hostname(), "15672"), User: u.User}
	if u.Scheme == "amqps" {
		m.Scheme = "https"
	}
	if m.User == nil {
		// RabbitMQ's default user, as amqp091 assumes for a URL without one.
		m.User = url.UserPassword("guest", "guest")
	}
	return m.String(), nil
}

// Validate names the field at fault. Errors never carry a password.
func (h HTTP) Validate() error {
	var errs []error
	if addr, _ := h.ListenAddr(); addr != "" {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, errors.New(`http.addr: not host:port (use "off" to disable)`))
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"http.ready_max_lag", h.ReadyMaxLag}, {"http.backlog_interval", h.BacklogInterval},
		{"http.retry_ratio_interval", h.RetryRatioInterval}, {"http.queue_interval", h.QueueInterval}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive", d.field))
		}
	}
	if h.ManagementURL != "" {
		u, err := url.Parse(h.ManagementURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, errors.New("http.management_url: must be an http:// or https:// URL"))
		}
	}
	if (h.ConsoleToken != "" || h.ConsoleTokenFile != "") && !h.Console {
		errs = append(errs, errors.New("http.console_token: set http.console: true as well (the token is for the console)"))
	}
	if h.ConsoleToken != "" && len(strings.TrimSpace(h.ConsoleToken)) < MinConsoleToken {
		// Length only: the message must not quote the token.
		errs = append(errs, fmt.Errorf("http.console_token: shorter than %d characters (e.g. openssl rand -hex 24)", MinConsoleToken))
	}
	if h.Console {
		if addr, _ := h.ListenAddr(); addr == "" {
			errs = append(errs, errors.New(`http.console: needs the HTTP server (http.addr is "off")`))
		}
	}
	for i, q := range h.Queues {
		if strings.TrimSpace(q) == "" {
			errs = append(errs, fmt.Errorf("http.queues[%d]: empty queue name", i))
		}
	}
	return errors.Join(errs...)
}

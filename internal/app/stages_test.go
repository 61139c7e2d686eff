package app

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
)

// parseStages parses a config of the stage keys in extra, with the
// broker: section given unless extra has one.
func parseStages(t *testing.T, extra string) *config.Config {
	t.Helper()
	base := "name: stages-test\ntables: [{preset: producer-message, schema: shop}]\n" +
		"source: {host: 127.0.0.1, port: 3308, user: relay}\nprimary: {host: 127.0.0.1, port: 3307, user: relay}\n"
	if !strings.Contains(extra, "broker:") {
		base += `broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}` + "\n"
	}
	cfg, err := config.Parse([]byte(base+extra), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Keys the config leaves at zero reach the stages as the stages' defaults,
// the values docs/configuration.md gives.
func TestStageDefaultsFromTheConfig(t *testing.T) {
	s, err := newStages(parseStages(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if rc := s.relay; rc.CheckpointInterval != time.Second || rc.MaxInflightBytes != 64<<20 ||
		rc.StoreOutageWindow != 30*time.Second || rc.BatchSize != 1000 {
		t.Errorf("relay: %+v", rc)
	}
	if lc := s.lease; lc.TTL != 5*time.Second {
		t.Errorf("ha.lease_ttl: %s, want 5s", lc.TTL)
	}
	if sc := s.sweeper; sc.GracePeriod != time.Minute || sc.Archive.Mode != "off" {
		t.Errorf("sweeper: %+v", sc)
	}
	if b := s.retry; b.Base != 5*time.Second || b.Max != 10*time.Minute {
		t.Errorf("retry: %+v", b)
	}
}

// relay.hold_backoff follows retry: bound by bound while unset, and its own
// key wins.
func TestHoldBackoffFollowsRetryUnlessSet(t *testing.T) {
	for _, tc := range []struct {
		yaml      string
		base, max time.Duration
	}{
		{"", 5 * time.Second, 10 * time.Minute},
		{"retry: {base: 100ms, max: 400ms}\n", 100 * time.Millisecond, 400 * time.Millisecond},
		{"retry: {base: 100ms, max: 400ms}\nrelay: {hold_backoff: {base: 1s, max: 2s}}\n", time.Second, 2 * time.Second},
		{"retry: {base: 1m}\nrelay: {hold_backoff: {max: 10s}}\n", 10 * time.Second, 10 * time.Second},
		{"relay: {hold_backoff: {base: 50ms}}\n", 50 * time.Millisecond, 10 * time.Minute},
	} {
		s, err := newStages(parseStages(t, tc.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if h := s.publisher.HoldBackoff; h.Base != tc.base || h.Max != tc.max {
			t.Errorf("%q: hold backoff %s..%s, want %s..%s", tc.yaml, h.Base, h.Max, tc.base, tc.max)
		}
	}
}

// A value only a stage checks is refused by Open, before anything connects,
// and by lint, named by its YAML key.
func TestStageConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"ha: {enabled: true, lease_ttl: 500ms}\n", "ha.lease_ttl: 500ms is under 1s"},
		{"sweeper: {batch_size: 20000}\n", "sweeper.batch_size: 20000 is not between 1 and 10000"},
		{"sweeper: {archive: {mode: truncate}}\n", `sweeper.archive.mode: "truncate"`},
		{"relay: {flush_interval: -1s}\n", "relay.flush_interval: must be positive"},
		{"relay: {buffer: -1}\n", "relay.buffer: must be at least 1"},
		{"relay: {max_inflight_bytes: 4096}\n", "relay.max_inflight_bytes: 4096 is under 1 MiB"},
		{"relay: {batch_size: -1}\n", "relay.batch_size: must be at least 1"},
		{"checkpoint: {interval: -1s}\n", "checkpoint.interval: must be positive"},
		{"checkpoint: {outage_window: -1s}\n", "checkpoint.outage_window:"},
		// Only retry.max (10m) bounds it: base over the max it follows.
		{"relay: {hold_backoff: {base: 20m}}\n", "relay.hold_backoff: base 20m0s and max 10m0s"},
		{"relay: {hold_backoff: {base: 10s, max: 1s}}\n", "relay.hold_backoff: base 10s and max 1s must be positive, base at most max"},
		{"relay: {hold_backoff: {base: -1s}}\n", "relay.hold_backoff.base: must not be negative"},
		{"relay: {hold_backoff: {max: -1s}}\n", "relay.hold_backoff.max: must not be negative"},
		{`broker: {url: "amqp://guest:guest@127.0.0.1:5672/", max_message_bytes: -1}` + "\n", "broker.max_message_bytes: -1 must be positive"},
		{`broker: {url: "amqp://guest:guest@127.0.0.1:5672/", max_message_bytes: 1073741824}` + "\n", "broker.max_message_bytes: 1073741824 is over RabbitMQ's ceiling"},
	} {
		refusedByOpenAndLint(t, parseStages(t, tc.yaml), tc.yaml, tc.want)
	}
}

// The binlog reader's keys are the reader's to check (pkg/binlog's
// Config.Validate), named by their YAML keys.
func TestReaderConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ source, want string }{
		{"source: {host: 127.0.0.1, port: 3308, user: relay, xa_buffer_rows: -5}", "source.xa_buffer_rows: -5 must be positive"},
		{"source: {host: 127.0.0.1, port: 3308, user: relay, xa_buffer_bytes: -1}", "source.xa_buffer_bytes: -1 must be positive"},
		{"source: {port: 3308, user: relay}", "source.host: required"},
		{"source: {host: 127.0.0.1, port: 3308}", "source.user: required"},
	} {
		yaml := "name: stages-test\ntables: [{preset: producer-message, schema: shop}]\n" + tc.source +
			"\nprimary: {host: 127.0.0.1, port: 3307, user: relay}\nbroker: {url: \"amqp://guest:guest@127.0.0.1:5672/\"}\n"
		cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("%s: the config refuses it itself: %v", tc.source, err)
		}
		refusedByOpenAndLint(t, cfg, tc.source, tc.want)
	}
}

// refusedByOpenAndLint checks that Open refuses cfg, before anything
// connects, and lint too, with an error containing want.
func refusedByOpenAndLint(t *testing.T, cfg *config.Config, yaml, want string) {
	t.Helper()
	if _, err := Open(cfg, zap.NewNop()); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Open with %q: %v, want an error naming %q", yaml, err, want)
	}
	var lint []string
	for _, p := range preflight.Lint(cfg, ConfigChecks()) {
		lint = append(lint, p.String())
	}
	if !preflight.HasErrors(preflight.Lint(cfg, ConfigChecks())) || !strings.Contains(strings.Join(lint, "\n"), want) {
		t.Errorf("lint with %q: %v, want an error naming %q", yaml, lint, want)
	}
}

// Each bad broker.url/urls value is named by its key and index, and no
// error shows a password.
func TestBrokerURLsRefused(t *testing.T) {
	for yaml, want := range map[string]string{
		`broker: {url: "amqp://mq-1/", urls: ["amqp://mq-2/"]}`: "broker.urls: set broker.url (one node) or broker.urls (the nodes of one cluster), not both",
		`broker: {window: 8}`: "broker.url: required (or broker.urls",
		`broker: {urls: []}`:  "broker.url: required (or broker.urls",
		`broker: {urls: ["amqp://relay:s3cret@mq-1/", "http://relay:s3cret@mq-2/"]}`: "broker.urls[1]: must start with amqp:// or amqps://",
		`broker: {urls: ["amqp://relay:s3cret@mq-1/", "amqp:///vh"]}`:                "broker.urls[1]: has no host",
		`broker: {urls: ["amqp://mq-1/", "amqp://mq-2/", "amqp://mq-1/"]}`:           "broker.urls[2]: the same URL as broker.urls[0]",
		`broker: {urls: ["amqps://mq-1/", "amqp://mq-2/"]}`:                          "broker.urls[1]: amqp:// where broker.urls[0] is amqps://",
	} {
		cfg := parseStages(t, yaml+"\n")
		refusedByOpenAndLint(t, cfg, yaml, want)
		_, err := newStages(cfg)
		var lint []string
		for _, p := range preflight.Lint(cfg, ConfigChecks()) {
			lint = append(lint, p.String())
		}
		if strings.Contains(fmt.Sprint(err, lint), "s3cret") {
			t.Errorf("%s: the error shows the password: %v", yaml, err)
		}
	}
}

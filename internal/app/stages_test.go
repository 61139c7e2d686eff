package app

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
)

func parseStages(t *testing.T, extra string) *config.Config {
	t.Helper()
	base := "name: stages-test\ntables: [{preset: producer-message, schema: shop}]\n" +
		"source: {host: 127.0.0.1, port: 3308, user: relay}\nprimary: {host: 127.0.0.1, port: 3307, user: relay}\n" +
		`broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}` + "\n"
	cfg, err := config.Parse([]byte(base+extra), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Keys the config leaves at zero reach the stages as the stages' defaults,
// the values the README's config reference gives.
func TestStageDefaultsFromTheConfig(t *testing.T) {
	cfg := parseStages(t, "")
	if rc := relayConfig(cfg); rc.CheckpointInterval != time.Second || rc.MaxInflightBytes != 64<<20 ||
		rc.StoreOutageWindow != 30*time.Second || rc.BatchSize != 1000 {
		t.Errorf("relay: %+v", rc)
	}
	if lc := leaseConfig(cfg); lc.TTL != 5*time.Second {
		t.Errorf("ha.lease_ttl: %s, want 5s", lc.TTL)
	}
	if sc := sweeperConfig(cfg.Sweeper); sc.GracePeriod != time.Minute || sc.Archive.Mode != "off" {
		t.Errorf("sweeper: %+v", sc)
	}
	if b := retryBackoff(cfg); b.Base != 5*time.Second || b.Max != 10*time.Minute {
		t.Errorf("retry: %+v", b)
	}
	if err := checkStages(cfg); err != nil {
		t.Fatal(err)
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
		if base, max := holdBackoff(parseStages(t, tc.yaml)); base != tc.base || max != tc.max {
			t.Errorf("%q: hold backoff %s..%s, want %s..%s", tc.yaml, base, max, tc.base, tc.max)
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
		// Only retry.max (10m) bounds it: base over the max it follows.
		{"relay: {hold_backoff: {base: 20m}}\n", "relay.hold_backoff: base 20m0s and max 10m0s"},
	} {
		cfg := parseStages(t, tc.yaml)
		if _, err := Open(cfg, zap.NewNop()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open with %q: %v, want an error naming %q", tc.yaml, err, tc.want)
		}
		var lint []string
		for _, p := range preflight.Lint(cfg, ConfigChecks()) {
			lint = append(lint, p.String())
		}
		if !preflight.HasErrors(preflight.Lint(cfg, ConfigChecks())) || !strings.Contains(strings.Join(lint, "\n"), tc.want) {
			t.Errorf("lint with %q: %v, want an error naming %q", tc.yaml, lint, tc.want)
		}
	}
}

package publisher

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// New fills the defaults and refuses an invalid Config, each bad field
// named by its YAML key and the URL's password never shown.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	var c Config
	c.Defaults()
	if c.MaxMessageSize != 0 || c.Window != 1024 { // 0: the broker's own limit, by its version
		t.Errorf("defaults: %+v", c)
	}
	if _, err := New(Config{URL: "amqp://guest:guest@127.0.0.1:5672/"}, zap.NewNop()); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	_, err := New(Config{URL: "http://relay:s3cret@rabbit/", Window: -1, MaxMessageSize: -1,
		HoldBackoff: HoldBackoff{Base: time.Minute, Max: time.Second}}, zap.NewNop())
	for _, want := range []string{"broker.url: must start with amqp:// or amqps://", "broker.window: must be at least 1",
		"broker.max_message_bytes: -1", "relay.hold_backoff: base 1m0s and max 1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error shows the password: %v", err)
	}
	if _, err := New(Config{}, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "broker.url: required") {
		t.Errorf("no URL: %v", err)
	}
}

// Defaults fills the zero fields and keeps the ones set; strict mode
// without PerKey publishes one message at a time whatever the window.
func TestConfigDefaults(t *testing.T) {
	var c Config
	c.Defaults()
	want := Config{Window: 1024, ReconnectMin: 200 * time.Millisecond, ReconnectMax: 10 * time.Second,
		ConnectionName: "binlog-relay", HoldBackoff: HoldBackoff{Base: time.Second, Max: time.Minute}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults: %+v, want %+v", c, want)
	}
	set := Config{Window: 8, MaxMessageSize: 1 << 10, ReconnectMin: time.Second, ReconnectMax: time.Minute,
		ConnectionName: "relay-a", HoldBackoff: HoldBackoff{Base: time.Millisecond, Max: time.Second}}
	got := set
	got.Defaults()
	if !reflect.DeepEqual(got, set) {
		t.Errorf("set fields changed: %+v, want %+v", got, set)
	}
	for _, c := range []struct {
		perKey bool
		window int
	}{{false, 1}, {true, 8}} {
		s := Config{Window: 8, Strict: true, PerKey: c.perKey}
		s.Defaults()
		if s.Window != c.window {
			t.Errorf("strict, per key %v: window %d, want %d", c.perKey, s.Window, c.window)
		}
	}
}

package binlog

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// New fills the defaults and refuses an invalid Config, each bad field
// named by its Config field.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	if _, err := New(Config{Host: "x", Port: 1, User: "u", Flavor: FlavorMySQL}, nil); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	_, err := New(Config{Flavor: "auto", XABufferRows: -1}, nil)
	for _, want := range []string{"Config.Host: required", "Config.Port: required", "Config.User: required",
		`Config.Flavor: "auto"`, "Config.XABufferRows: -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
}

// Defaults fills the zero fields, a random server id above 100000 among
// them, and keeps the ones set.
func TestConfigDefaults(t *testing.T) {
	var c Config
	c.Defaults()
	id := c.ServerID
	c.ServerID = 0
	want := Config{Heartbeat: time.Second, ReconnectMin: 200 * time.Millisecond, ReconnectMax: 10 * time.Second,
		StopTimeout: 10 * time.Second, FailoverAfter: 3, XABufferRows: 100_000, XABufferBytes: 64 << 20,
		TxBufferRows: 5_000, TxBufferBytes: 8 << 20}
	if id < 100000 || !reflect.DeepEqual(c, want) {
		t.Errorf("defaults: server id %d, %+v; want %+v", id, c, want)
	}
	set := Config{ServerID: 7, Heartbeat: 2 * time.Second, ReconnectMin: time.Second, ReconnectMax: time.Minute,
		StopTimeout: time.Second, FailoverAfter: 1, XABufferRows: 10, XABufferBytes: 1 << 10,
		TxBufferRows: 5, TxBufferBytes: 1 << 10}
	got := set
	got.Defaults()
	if !reflect.DeepEqual(got, set) {
		t.Errorf("set fields changed: %+v, want %+v", got, set)
	}
}

package relay

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// Defaults give a valid Config; Validate names every bad field by its YAML
// key (checkpoint.interval is the checkpoint: section's), and New refuses
// to build a relay from such a config.
func TestConfigValidateNamesTheKeys(t *testing.T) {
	c := Config{BatchSize: -1, FlushInterval: -time.Second, CheckpointInterval: -time.Second, Buffer: -1,
		StoreOutageWindow: -time.Second, MaxInflightBytes: -1, MaxUnmarked: -1, MarkSessions: MaxMarkSessions + 1}
	if r, err := New(c, nil, nil, nil, nil, nil, nil); err == nil || r != nil {
		t.Fatalf("New built a relay from an invalid config (err %v)", err)
	}
	c.Defaults()
	err := c.Validate()
	for _, want := range []string{"relay.batch_size", "relay.flush_interval", "checkpoint.interval",
		"checkpoint.outage_window", "relay.buffer", "relay.max_inflight_bytes", "relay.max_unmarked", "relay.mark_sessions"} {
		if err == nil || !strings.Contains(err.Error(), want+":") {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	var defaults Config
	defaults.Defaults()
	if err := defaults.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// Defaults fills the zero fields (the observer with one that records
// nothing) and keeps the ones set.
func TestConfigDefaults(t *testing.T) {
	var c Config
	c.Defaults()
	want := Config{BatchSize: 1000, FlushInterval: 200 * time.Millisecond, MaxUnmarked: 4096, MarkSessions: 4, CheckpointInterval: time.Second, Buffer: 1024,
		DrainTimeout: 30 * time.Second, Observer: nopObserver{}, MaxInflightBytes: 64 << 20, WarnEvery: 10 * time.Second}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults: %+v, want %+v", c, want)
	}
	set := Config{BatchSize: 1, FlushInterval: time.Millisecond, MaxUnmarked: 3, MarkSessions: 2, CheckpointInterval: time.Minute, Buffer: 2,
		DrainTimeout: time.Second, Observer: &ownObserver{}, MaxInflightBytes: 1, WarnEvery: time.Minute}
	got := set
	got.Defaults()
	if !reflect.DeepEqual(got, set) {
		t.Errorf("set fields changed: %+v, want %+v", got, set)
	}
}

// ownObserver stands for a caller's observer, which Defaults must keep.
type ownObserver struct{ nopObserver }

// A relay with no lane to publish on is refused, not built to panic at its
// first row.
func TestNewRefusesNoLanes(t *testing.T) {
	if r, err := New(Config{}, nil, nil, nil, nil, nil, nil); err == nil || r != nil || !strings.Contains(err.Error(), "relay.lanes") {
		t.Fatalf("New without lanes: %v, %v; want an error naming relay.lanes", r, err)
	}
}

package relay

import (
	"strings"
	"testing"
	"time"
)

// Defaults give a valid Config; Validate names every bad field by its YAML
// key (checkpoint.interval is the checkpoint: section's), and New refuses
// to build a relay from such a config.
func TestConfigValidateNamesTheKeys(t *testing.T) {
	c := Config{BatchSize: -1, FlushInterval: -time.Second, CheckpointInterval: -time.Second, Buffer: -1,
		StoreOutageWindow: -time.Second, MaxInflightBytes: -1}
	if r, err := New(c, nil, nil, nil, nil, nil, nil); err == nil || r != nil {
		t.Fatalf("New built a relay from an invalid config (err %v)", err)
	}
	c.Defaults()
	err := c.Validate()
	for _, want := range []string{"relay.batch_size", "relay.flush_interval", "checkpoint.interval",
		"checkpoint.outage_window", "relay.buffer", "relay.max_inflight_bytes"} {
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

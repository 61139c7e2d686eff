package config

import (
	"strings"
	"testing"
	"time"
)

const haBase = `name: test-relay
primary: {host: 127.0.0.1, port: 3307, user: relay}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}
tables: [{preset: producer-message, schema: shop}]
`

// ha: and source.hosts: defaults, and each bad value named by its field.
func TestHAAndSourceHosts(t *testing.T) {
	c, err := parse(t, haBase+"source: {hosts: [\"10.0.0.2\", \"10.0.0.3:3307\"], port: 3310, user: relay}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.Host != "10.0.0.2" || c.Source.Port != 3310 {
		t.Fatalf("source is %s, want the first of source.hosts with source.port", c.Source.Addr())
	}
	// lease_ttl stays 0, the lease's default (5s: internal/app's stage tests).
	if c.HA.Enabled || c.HA.LeaseTTL != 0 || c.Checkpoint.OutageWindow != 30*time.Second {
		t.Fatalf("defaults: ha %+v, outage window %s", c.HA, c.Checkpoint.OutageWindow)
	}
	if e := c.Source.HostEntries()[1]; e.Host != "10.0.0.3" || e.Port != 3307 {
		t.Fatalf("second host %s:%d", e.Host, e.Port)
	}
	for _, tc := range []struct{ yaml, field string }{
		{"source: {host: 10.0.0.1, hosts: [10.0.0.2], user: relay}", "source.host:"},
		{"source: {hosts: [\"10.0.0.2:x\"], user: relay}", "source.hosts[0]:"},
		{"source: {host: 10.0.0.1, user: relay}\nprimary: {hosts: [10.0.0.9]}", "primary.hosts:"},
		{"source: {host: 10.0.0.1, user: relay}\nha: {enable: true}", "ha.enable:"},
	} {
		y := haBase + tc.yaml + "\n"
		if strings.Contains(tc.yaml, "primary:") {
			y = strings.Replace(haBase, "primary: {host: 127.0.0.1, port: 3307, user: relay}\n", "", 1) + tc.yaml + "\n"
		}
		_, err := parse(t, y, nil)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: error %v, want one naming %s", tc.yaml, err, tc.field)
		}
	}
}

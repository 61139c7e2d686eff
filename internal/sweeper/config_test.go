package sweeper

import (
	"strings"
	"testing"
	"time"
)

// Defaults fills the zero fields with valid values and keeps the ones set.
func TestConfigDefaultsAreValid(t *testing.T) {
	var c Config
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Config{Interval: 5 * time.Second, GracePeriod: time.Minute, BatchSize: 500, ZombieTimeout: 5 * time.Minute,
		Archive: Archive{Mode: ArchiveOff, Retention: 7 * 24 * time.Hour, BatchSize: 1000, Pause: 100 * time.Millisecond,
			Interval: time.Minute, Table: "{table}_archive"}}
	if c != want {
		t.Errorf("defaults: %+v, want %+v", c, want)
	}
	set := Config{Interval: time.Second, GracePeriod: time.Second, BatchSize: 1, ZombieTimeout: time.Second,
		Archive: Archive{Mode: ArchiveMove, Retention: time.Hour, BatchSize: 1, Pause: time.Second, Interval: time.Hour, Table: "old_{table}"}}
	got := set
	got.Defaults()
	if got != set {
		t.Errorf("set fields changed: %+v, want %+v", got, set)
	}
}

// Every bad field is reported, by its YAML path.
func TestConfigValidateNamesFields(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"negative grace", func(c *Config) { c.GracePeriod = -time.Second }, []string{"sweeper.grace_period"}},
		{"zero interval", func(c *Config) { c.Interval = -1 }, []string{"sweeper.interval"}},
		{"huge batch", func(c *Config) { c.BatchSize = 20000 }, []string{"sweeper.batch_size"}},
		{"zombie timeout", func(c *Config) { c.ZombieTimeout = -time.Minute }, []string{"sweeper.zombie_timeout"}},
		{"archive mode", func(c *Config) { c.Archive.Mode = "truncate" }, []string{`sweeper.archive.mode: "truncate"`}},
		{"archive fields", func(c *Config) {
			c.Archive.Mode, c.Archive.Retention, c.Archive.BatchSize, c.Archive.Pause = ArchiveDelete, -time.Hour, -1, -time.Second
		}, []string{"sweeper.archive.retention", "sweeper.archive.batch_size", "sweeper.archive.pause"}},
		{"archive table", func(c *Config) { c.Archive.Mode, c.Archive.Table = ArchiveMove, "old-{table}" }, []string{"sweeper.archive.table"}},
		{"off ignores archive fields", func(c *Config) { c.Archive.Retention = -time.Hour }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			c.Defaults()
			tc.edit(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// New refuses an invalid Config with the key named, before touching any
// table or server.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	_, err := New(Config{BatchSize: 20000}, nil, nil, nil, nil, nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "sweeper.batch_size: 20000") {
		t.Fatalf("error %v, want one naming sweeper.batch_size", err)
	}
}

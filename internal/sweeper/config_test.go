package sweeper

import (
	"context"
	"errors"
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

// inBatches stops at the first short batch, pauses only between full ones,
// and stops on an error with what was done so far.
func TestInBatches(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name        string
		size        int
		returns     []int64
		err         error // returned by the last batch
		wantTotal   int64
		wantBatches int
	}{
		{"nothing to do", 1000, []int64{0}, nil, 0, 1},
		{"one short batch", 1000, []int64{10}, nil, 10, 1},
		{"2,500 rows in batches of 1,000", 1000, []int64{1000, 1000, 500}, nil, 2500, 3},
		{"an exact multiple needs one empty batch to know it is done", 1000, []int64{1000, 1000, 0}, nil, 2000, 3},
		{"an error keeps the rows done", 1000, []int64{1000, 0}, boom, 1000, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var last time.Time
			var gaps []time.Duration
			total, batches, err := inBatches(context.Background(), tc.size, 5*time.Millisecond, func() (int64, error) {
				if !last.IsZero() {
					gaps = append(gaps, time.Since(last))
				}
				last = time.Now()
				n := tc.returns[calls]
				calls++
				if calls == len(tc.returns) && tc.err != nil {
					return 0, tc.err
				}
				return n, nil
			})
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if total != tc.wantTotal || batches != tc.wantBatches {
				t.Errorf("total %d in %d batches, want %d in %d", total, batches, tc.wantTotal, tc.wantBatches)
			}
			for _, g := range gaps {
				if g < 5*time.Millisecond {
					t.Errorf("batches %s apart, want the 5ms pause between them", g)
				}
			}
		})
	}
}

func TestInBatchesStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, _, err := inBatches(ctx, 10, time.Hour, func() (int64, error) {
		calls++
		cancel()
		return 10, nil
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("err %v after %d calls", err, calls)
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

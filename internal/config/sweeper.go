package config

import "time"

// Sweeper is the `sweeper:` section. A zero field means the sweeper's own
// default (internal/sweeper.Config, which also validates the values when
// the sweeper is built).
type Sweeper struct {
	// Enabled runs the sweeper inside `binlog-relay run`; nil means the
	// default (SweeperEnabled).
	Enabled       *bool          `yaml:"enabled"`
	Interval      time.Duration  `yaml:"interval"`
	GracePeriod   time.Duration  `yaml:"grace_period"`
	BatchSize     int            `yaml:"batch_size"`
	ZombieTimeout time.Duration  `yaml:"zombie_timeout"`
	Archive       SweeperArchive `yaml:"archive"`
}

// SweeperArchive is `sweeper.archive:`, moving or deleting old SENT rows.
type SweeperArchive struct {
	// Mode is off (the default), delete or move.
	Mode      string        `yaml:"mode"`
	Retention time.Duration `yaml:"retention"`
	// BatchSize rows per statement, Pause between statements.
	BatchSize int           `yaml:"batch_size"`
	Pause     time.Duration `yaml:"pause"`
	Interval  time.Duration `yaml:"interval"`
	// Table is the archive table for move; "{table}" is the outbox table's
	// name.
	Table string `yaml:"table"`
}

// SweeperEnabled reports whether `run` starts the sweeper (`binlog-relay
// sweep` runs it whatever this says). The default is on, except with
// relay.ordering: strict: a row the stream holds past the grace period would
// be due for the sweeper too, which would publish it and the rows behind it
// out of order. Set sweeper.enabled: true to have both.
func (c *Config) SweeperEnabled() bool {
	if c.Sweeper.Enabled != nil {
		return *c.Sweeper.Enabled
	}
	return c.Relay.Ordering != "strict"
}

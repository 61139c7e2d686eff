package config

import "github.com/binlog-relay/binlog-relay/internal/sweeper"

// Sweeper is the `sweeper:` section: `enabled` and the sweeper's own fields
// (interval, grace_period, batch_size, zombie_timeout, archive). See
// internal/sweeper.
type Sweeper = sweeper.Config

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

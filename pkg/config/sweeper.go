package config

// Sweeper configures the fallback sweeper (see pkg/sweeper).
type Sweeper struct {
	// Enabled runs the sweeper inside `binlog-relay run` (default true).
	Enabled *bool `yaml:"enabled"`
}

// SweeperEnabled reports whether `run` starts the sweeper.
func (c *Config) SweeperEnabled() bool { return c.Sweeper.Enabled == nil || *c.Sweeper.Enabled }

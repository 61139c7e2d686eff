package app

import (
	"github.com/binlog-relay/binlog-relay/pkg/config"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Lint checks everything about a parsed config that needs no server: the
// logger settings, connection strings, TLS files, route templates. The
// config itself was validated by config.Load (tables, statuses, fields).
// It is `binlog-relay lint`: what check does, minus the servers.
func Lint(cfg *config.Config) []Problem {
	c := &checker{}
	if _, err := NewLogger(cfg.Log); err != nil {
		c.add(Error, "config", "%v", err)
	}
	for _, m := range []struct {
		field string
		m     config.MySQL
	}{{"source", cfg.Source}, {"primary", cfg.Primary}} {
		if _, err := m.m.DSN(m.field); err != nil {
			c.add(Error, "config", "%v", err)
		}
		if _, err := m.m.TLSConfig(m.field); err != nil {
			c.add(Error, "config", "%v", err)
		}
	}
	if _, err := cfg.Broker.TLSConfig(); err != nil {
		c.add(Error, "config", "%v", err)
	}
	if _, err := cfg.Redis.TLS.TLSConfig("redis"); err != nil {
		c.add(Error, "config", "%v", err)
	}
	if _, err := router.New(cfg.Tables, cfg.Name); err != nil {
		c.add(Error, "config", "tables: %v", err)
	}
	return c.problems
}

package preflight

// The lint command: the config checks that need no server.

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Lint checks everything about a parsed config that needs no server: the
// logger settings, connection strings, TLS files, route templates, the
// stages' Configs. The config itself was validated by config.Load
// (tables, statuses, fields). It is `binlog-relay lint`: what check does,
// minus the servers. owned are the checks of the config that internal/app
// owns; absent are the files a load for lint left out
// (config.LoadOptions.SkipAbsentFiles), each reported as not checked.
func Lint(cfg *config.Config, owned ConfigChecks, absent ...config.AbsentFile) []Problem {
	c := &checker{}
	for _, f := range absent {
		c.add(Info, "config", "%s", f)
	}
	if _, err := owned.NewLogger(cfg.Log); err != nil {
		c.add(Error, "config", "%v", err)
	}
	for _, m := range []struct {
		field string
		m     config.MySQL
	}{{"source", cfg.Source}, {"primary", cfg.Primary}} {
		if _, err := m.m.DriverConfig(m.field); err != nil {
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
	if err := owned.CheckStages(cfg); err != nil { // internal/app/stages.go
		c.add(Error, "config", "%v", err)
	}
	if _, err := router.New(cfg.Tables, router.WithAppID(cfg.Name)); err != nil {
		c.add(Error, "config", "tables: %v", err)
	}
	lintReconcile(c, cfg)
	return c.problems
}

// lintReconcile checks the reconcile section's connections and says what a
// run would leave out.
func lintReconcile(c *checker, cfg *config.Config) {
	r := cfg.Reconcile
	for i, rc := range r.Consumers {
		field := fmt.Sprintf("reconcile.consumers[%d]", i)
		if _, err := rc.ConsumerDriverConfig(field); err != nil {
			c.add(Error, "config", "%v", err)
		}
	}
	if len(r.Consumers) == 0 && r.Interval == 0 {
		return
	}
	for _, t := range cfg.Tables {
		if t.Columns.CreatedAt == "" {
			c.add(Warning, t.FullName(), "reconcile skips this table: it has no columns.created_at, which the window and the grace period are measured on")
		}
	}
	if r.Interval > 0 && len(r.Consumers) == 0 {
		c.add(Warning, "config", "reconcile.interval is set but reconcile.consumers is empty: the periodic run checks only FAILED and long-pending outbox rows")
	}
	if r.Repair && r.Interval > 0 && !cfg.SweeperEnabled() {
		c.add(Warning, "config", "reconcile.repair resets rows to pending, but sweeper.enabled is false: they go out only when a sweeper runs (binlog-relay sweep)")
	}
}

// ConfigChecks are the checks of a config that Lint runs and internal/app
// owns: the logger the log section builds, and the stage Configs built
// from the config (each refused value named by its YAML key).
type ConfigChecks struct {
	NewLogger   func(config.Log) (*zap.Logger, error)
	CheckStages func(*config.Config) error
}

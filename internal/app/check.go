package app

// The check command: Check runs every start-up check and returns the
// problems, one line each (check_servers.go holds the checks).

import (
	"context"
	"fmt"
	"time"
)

// Severity of a start-up finding.
type Severity string

const (
	// Error stops the relay from starting.
	Error Severity = "ERROR"
	// Warning is reported; the relay starts.
	Warning Severity = "WARN"
	// Info is a setting worth knowing; nothing to change.
	Info Severity = "INFO"
)

// Problem is one finding, phrased as what to change.
type Problem struct {
	Severity Severity
	Where    string // source, primary, broker, redis, table name
	Text     string
}

func (p Problem) String() string { return fmt.Sprintf("%s %s: %s", p.Severity, p.Where, p.Text) }

// HasErrors reports whether any problem is an Error.
func HasErrors(ps []Problem) bool {
	for _, p := range ps {
		if p.Severity == Error {
			return true
		}
	}
	return false
}

// FirstError returns the first Error, for a one-line summary.
func FirstError(ps []Problem) string {
	for _, p := range ps {
		if p.Severity == Error {
			return p.String()
		}
	}
	return ""
}

type checker struct {
	a        *App
	problems []Problem
}

func (c *checker) add(sev Severity, where, format string, args ...any) {
	c.problems = append(c.problems, Problem{Severity: sev, Where: where, Text: fmt.Sprintf(format, args...)})
}

// Check verifies everything the relay needs from the servers. Each problem
// is one line saying what to change; an unreachable server is one problem,
// not a cascade.
func (a *App) Check(ctx context.Context) []Problem {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := &checker{a: a}
	sourceUp := c.checkSource(ctx)
	if sourceUp {
		c.checkReplica(ctx) // replica.go
		if flavor, err := a.Flavor(ctx); err == nil {
			c.checkRetention(ctx, flavor) // check_retention.go
		}
		c.checkStream(ctx)
		c.checkDuplicates(ctx) // instance.go
	}
	c.checkPrimary(ctx)
	if sourceUp {
		c.checkTimeZones(ctx) // check_timezone.go
	}
	c.checkBroker(ctx)
	if err := a.Redis.Ping(ctx).Err(); err != nil {
		c.add(Error, "redis", "cannot reach %s: %v", a.Cfg.Redis.Endpoint(), err)
	}
	c.checkReconcile(ctx) // reconcile.go
	return c.problems
}

// Package preflight owns the start-up checks and lint: what `binlog-relay
// check` and the start of `run` verify on the servers (the source, the
// primary, the broker, Redis) and what `binlog-relay lint` verifies of a
// config without them. Each problem is one line saying what to change; an
// unreachable server is one problem, not a cascade.
//
// The checks read a narrow Servers (connections, config, a few functions
// of the running relay), never the App; checks owned elsewhere come in as
// functions that add to the same Report.
package preflight

// The check command: Check runs every start-up check and returns the
// problems, one line each (servers.go holds the checks).

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
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

// Report collects the problems the checks find, in the order found.
type Report struct {
	problems []Problem
}

// Add records one problem; the text is format with args.
func (r *Report) Add(sev Severity, where, format string, args ...any) {
	r.problems = append(r.problems, Problem{Severity: sev, Where: where, Text: fmt.Sprintf(format, args...)})
}

// Problems is what was added so far.
func (r *Report) Problems() []Problem { return r.problems }

// Extra is a check owned elsewhere: it adds what it finds to r.
type Extra func(ctx context.Context, r *Report)

// Pinger is what the Redis check needs of a client (redis.UniversalClient
// is one).
type Pinger interface {
	Ping(ctx context.Context) *redis.StatusCmd
}

// Servers is what the checks read: the relay's connections, its config and
// the few answers of the running relay they need, and the checks owned
// elsewhere that Check runs among its own.
type Servers struct {
	Config *config.Config
	Log    *zap.Logger

	// Source is the pool to the source replica; SourceConfig is the one
	// of source.hosts it reads now (a failover moves it), which names the
	// source in every problem and is what the binlog stream dials.
	Source       *sql.DB
	SourceConfig func() config.MySQL
	// Flavor is the source's flavour (binlog.FlavorMySQL or
	// binlog.FlavorMariaDB), or why it is not known.
	Flavor func(ctx context.Context) (string, error)
	// IsReplica reports whether the source replicates from another server
	// (nil: its SHOW REPLICA STATUS says).
	IsReplica func(ctx context.Context) bool
	// StartPosition is where the relay would start, and whether that is
	// a saved checkpoint.
	StartPosition func(ctx context.Context) (binlog.Position, bool, error)
	// Gaps is the gap policy a lost checkpoint or a purged position is
	// judged by.
	Gaps Gaps
	// Instances finds a second relay with this name or this
	// source.server_id.
	Instances Instances
	// Starting: run's start, where a second replica with this
	// source.server_id is an error, not a warning.
	Starting bool
	// BinlogPassword is what the binlog stream signs in to m with: the
	// password, or the token signer that makes one.
	BinlogPassword func(ctx context.Context, m config.MySQL) (string, binlog.PasswordFunc, error)

	Primary *sql.DB
	Redis   Pinger
	// StreamPort probes broker.stream's port (when a stream is set).
	StreamPort func(ctx context.Context) (uint64, error)

	// AtEnd are checks owned elsewhere, run last whatever answered.
	AtEnd []Extra
}

// checker runs the checks over one Servers into its Report.
type checker struct {
	s *Servers
	Report
}

func (c *checker) add(sev Severity, where, format string, args ...any) {
	c.Add(sev, where, format, args...)
}

func (c *checker) run(ctx context.Context, checks []Extra) {
	for _, check := range checks {
		check(ctx, &c.Report)
	}
}

// Check verifies everything the relay needs from the servers. Each problem
// is one line saying what to change; an unreachable server is one problem,
// not a cascade.
func Check(ctx context.Context, s *Servers) []Problem {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := &checker{s: s}
	sourceUp := c.checkSource(ctx)
	if sourceUp {
		c.checkReplica(ctx) // guards.go
		if flavor, err := s.Flavor(ctx); err == nil {
			c.checkRetention(ctx, flavor) // retention.go
		}
		c.checkStream(ctx)
		c.checkDuplicates(ctx) // guards.go
	}
	c.checkPrimary(ctx)
	if sourceUp {
		c.checkTimeZones(ctx) // timezone.go
	}
	c.checkRouteZones(ctx) // timezone.go
	c.checkBroker(ctx)     // broker.go
	if err := s.Redis.Ping(ctx).Err(); err != nil {
		c.add(Error, "redis", "cannot reach %s: %v", s.Config.Redis.Endpoint(), err)
	}
	c.run(ctx, s.AtEnd)
	return c.problems
}

// CheckSource runs the source's own checks (settings, grants, tables), and
// says whether the source answered at all.
func CheckSource(ctx context.Context, s *Servers) (problems []Problem, up bool) {
	c := &checker{s: s}
	up = c.checkSource(ctx)
	return c.problems, up
}

package app

// The check command: Check runs internal/preflight's start-up checks over
// the App's connections, with the checks app still owns among them
// (replica.go, instance.go, gap.go, reconcile.go).

import (
	"context"

	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/internal/startpos"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// The severities the checks app owns report with.
const (
	Error   = preflight.Error
	Warning = preflight.Warning
	Info    = preflight.Info
)

// checker is what the checks app owns add their problems through.
type checker struct {
	a *App
	r *preflight.Report
}

func (c *checker) add(sev preflight.Severity, where, format string, args ...any) {
	c.r.Add(sev, where, format, args...)
}

// Check verifies everything the relay needs from the servers. Each problem
// is one line saying what to change; an unreachable server is one problem,
// not a cascade.
func (a *App) Check(ctx context.Context) []preflight.Problem {
	return preflight.Check(ctx, a.servers())
}

// servers is what the checks read of the App.
func (a *App) servers() *preflight.Servers {
	owned := func(check func(*checker, context.Context)) preflight.Extra {
		return func(ctx context.Context, r *preflight.Report) { check(&checker{a: a, r: r}, ctx) }
	}
	return &preflight.Servers{
		Config:       a.Cfg,
		Log:          a.Log,
		Source:       a.Source,
		SourceConfig: a.src.Current,
		Flavor:       a.Flavor,
		StartPosition: func(ctx context.Context) (binlog.Position, bool, error) {
			p, cp, err := startpos.Start(ctx, a.Store, appSource{a})
			return p, cp != nil, err
		},
		LostCheckpoint: func(ctx context.Context) string {
			if since, lost, err := a.checkpointLost(ctx); err == nil && lost { // gap.go
				return a.lostWhat(since)
			}
			return ""
		},
		Gap:            func(r *preflight.Report, where, what string) { (&checker{a: a, r: r}).checkGap(where, what) },
		BinlogPassword: source.BinlogPassword,
		Primary:        a.Primary,
		Redis:          a.Redis,
		StreamPort:     a.checkStreamPort,                                    // streams.go
		OnSource:       []preflight.Extra{owned((*checker).checkReplica)},    // replica.go
		AfterStream:    []preflight.Extra{owned((*checker).checkDuplicates)}, // instance.go
		AtEnd:          []preflight.Extra{owned((*checker).checkReconcile)},  // reconcile.go
	}
}

// ConfigChecks are the checks of a config app owns, for preflight.Lint.
func ConfigChecks() preflight.ConfigChecks {
	return preflight.ConfigChecks{NewLogger: NewLogger, CheckStages: checkStages}
}

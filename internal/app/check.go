package app

// The check command: Check runs internal/preflight's start-up checks over
// the App's connections, with reconcile's (reconcile.go) among them.

import (
	"context"

	"github.com/binlog-relay/binlog-relay/internal/instance"
	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/internal/startpos"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// Check verifies everything the relay needs from the servers. Each problem
// is one line saying what to change; an unreachable server is one problem,
// not a cascade.
func (a *App) Check(ctx context.Context) []preflight.Problem {
	var r preflight.Report
	if err := a.ResolveTables(ctx); err != nil {
		// A source that cannot be read is reported by the checks below.
		r.Add(preflight.Error, "tables", "%v", err)
		return append(r.Problems(), preflight.Check(ctx, a.servers())...)
	}
	a.checkPatterns(&r)
	return append(r.Problems(), preflight.Check(ctx, a.servers())...)
}

// servers is what the checks read of the App.
func (a *App) servers() *preflight.Servers {
	g := a.guard.get(a)
	return &preflight.Servers{
		Config:       a.Cfg,
		Log:          a.Log,
		Source:       a.Source.DB(),
		SourceConfig: a.Source.Current,
		Flavor:       a.Source.Flavor,
		StartPosition: func(ctx context.Context) (binlog.Position, bool, error) {
			p, cp, err := startpos.Start(ctx, a.Store, a.Source)
			return p, cp != nil, err
		},
		Gaps:           g.gaps,
		Instances:      instances{g.heartbeat, g.serverIDs},
		Starting:       a.starting.Load(),
		BinlogPassword: source.BinlogPassword,
		Primary:        a.Primary,
		Redis:          a.Redis,
		StreamPort:     a.wire.checkStreamPort,              // streams.go
		AtEnd:          []preflight.Extra{a.checkReconcile}, // reconcile.go
	}
}

// instances is preflight.Instances: the relay name's heartbeat and the
// source's replicas with this source.server_id.
type instances struct {
	*instance.Heartbeat
	*instance.ServerIDs
}

// ConfigChecks are the checks of a config app owns, for preflight.Lint.
func ConfigChecks() preflight.ConfigChecks {
	return preflight.ConfigChecks{NewLogger: ops.NewLogger, CheckStages: checkStages}
}

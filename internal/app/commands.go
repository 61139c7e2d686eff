package app

// The one-shot commands' view of the App (internal/command runs them).

import (
	"context"
	"io"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/replica"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// Env is what internal/command's commands run on: the App's config,
// logger and connections, and what only the App builds.
func (a *App) Env() command.Env {
	return command.Env{
		Cfg: a.Cfg, Log: a.Log, Source: a.src, Primary: a.Primary, Redis: a.Redis, Store: a.Store,
		Reports:   a.reconcileStore(),
		NewRouter: a.newRouter, // headers.go
		NewPublisher: func(connName string, log *zap.Logger) (*publisher.Publisher, error) {
			return a.newPublisher(connName, false, false, log)
		},
		NewSweeper:    a.newSweeper,    // sweep.go
		NewReconciler: a.newReconciler, // reconcile.go
		ReplicaStatus: func(ctx context.Context, w io.Writer, cp checkpoint.Checkpoint, haveCP bool) (bool, error) {
			return replica.PrintStatus(ctx, w, replicaServers{a}, cp, haveCP)
		},
	}
}

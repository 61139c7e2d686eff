package app

// The one-shot commands' view of the App (internal/command runs them).

import (
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/reconcile"
)

// Env is what internal/command's commands run on: the App's config,
// logger and connections, and what only the App builds.
func (a *App) Env() command.Env {
	return command.Env{
		Cfg: a.Cfg, Log: a.Log, Source: a.Source, Primary: a.Primary, Redis: a.Redis, Store: a.Store,
		Reports:   reconcile.Store{Client: a.Redis, Key: a.Cfg.Reconcile.Key},
		NewRouter: a.wire.router,
		NewPublisher: func(connName string, log *zap.Logger) (*publisher.Publisher, error) {
			return a.wire.publisher(connName, false, false, log)
		},
		NewSweeper:    a.wire.sweeper,
		NewReconciler: a.newReconciler, // reconcile.go

	}
}

package app

// The HTTP endpoints (internal/ops serves them) over this App's state.

import (
	"context"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ops"
)

// HTTPAddr is the address /metrics, /healthz and /readyz listen on; empty
// when the server is off or not started.
func (a *App) HTTPAddr() string {
	if p := a.ops.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// httpService serves /metrics, /healthz, /readyz and /leader and runs the
// pollers behind the metrics that need a query (backlog on the replica,
// queue depth, Redis). It keeps serving while the binlog path drains and
// stops after it (stopHooks), so the last scrape sees the final counts.
func (a *App) httpService() service {
	addr, explicit := a.Cfg.HTTP.ListenAddr()
	if addr == "" {
		return nil
	}
	if err := a.Cfg.HTTP.Validate(); err != nil {
		return func(context.Context) error { return err }
	}
	ln, err := ops.Listen(addr, explicit, a.Log)
	if err != nil {
		return func(context.Context) error { return err }
	}
	if ln == nil {
		return nil
	}
	bound := ln.Addr().String()
	a.ops.addr.Store(&bound)
	m := a.Metrics()
	srv := &ops.Server{Metrics: m.Handler(), Ready: a.readyText, Leader: a.leaderText, Pollers: a.pollers(m), Log: a.Log}
	ui, err := a.newConsole() // console.go
	if err != nil {
		_ = ln.Close()
		return func(context.Context) error { return err }
	}
	if ui != nil {
		srv.Console = ui
	}
	a.stops.add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		a.ops.addr.Store(nil)
	})
	return func(ctx context.Context) error { return srv.Serve(ctx, ln) }
}

// leaderText is /leader's status and body.
func (a *App) leaderText() (int, string) {
	return ops.LeaderText(ops.Leadership{Leading: a.leader.Is(), HAEnabled: a.Cfg.HA.Enabled, Leader: a.leaderName(), Name: a.Cfg.Name})
}

// readyText is /readyz's status and body.
func (a *App) readyText() (int, string) {
	ok, why := a.Ready()
	return ops.ReadyText(a.standby(), a.leaderName(), ok, why)
}

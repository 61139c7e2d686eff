package app

import (
	"context"
	"sync"
)

// A service runs beside the binlog path for the life of `run` (the sweeper,
// the HTTP endpoints) and returns when ctx ends.
type service func(ctx context.Context) error

// services lists what runs beside the binlog path.
func (a *App) services() []service {
	out := []service{a.replicaService(), a.guard.get(a).heartbeat.Run, a.guard.get(a).gaps.MarkFirstSave}
	if a.Cfg.SweeperEnabled() {
		out = append(out, a.sweep)
	}
	if svc := a.reconcileService(); svc != nil {
		out = append(out, svc)
	}
	if svc := a.rosterService(); svc != nil {
		out = append(out, svc)
	}
	if svc := a.httpService(); svc != nil {
		out = append(out, svc)
	}
	return out
}

// stopHooks is work to do once the binlog path has drained (a service
// that must outlive the drain, like the HTTP server, stops here).
type stopHooks struct {
	mu    sync.Mutex
	hooks []func()
}

func (s *stopHooks) add(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, f)
}

func (s *stopHooks) run() {
	s.mu.Lock()
	hooks := s.hooks
	s.hooks = nil
	s.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

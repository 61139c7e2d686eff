package app

import "context"

// A service runs beside the binlog path for the life of `run` (the sweeper,
// the HTTP endpoints) and returns when ctx ends.
type service func(ctx context.Context) error

// services lists what runs beside the binlog path.
func (a *App) services() []service {
	out := []service{a.replicaService(), a.heartbeat().Run, a.gaps().MarkFirstSave}
	if svc := a.sweeperService(); svc != nil {
		out = append(out, svc)
	}
	if svc := a.reconcileService(); svc != nil {
		out = append(out, svc)
	}
	if svc := a.httpService(); svc != nil {
		out = append(out, svc)
	}
	return out
}

// onStop registers work to do once the binlog path has drained (a service
// that must outlive the drain, like the HTTP server, stops here).
func (a *App) onStop(f func()) {
	a.stopMu.Lock()
	defer a.stopMu.Unlock()
	a.stopHooks = append(a.stopHooks, f)
}

func (a *App) stopServices() {
	a.stopMu.Lock()
	hooks := a.stopHooks
	a.stopHooks = nil
	a.stopMu.Unlock()
	for _, f := range hooks {
		f()
	}
}

package app

// Leadership as the endpoints and metrics report it: which relay of a name
// streams the binlog now (/leader, binlog_relay_leader), what a standby
// answers on /readyz, the pollers only the leader runs, and the build
// (binlog_relay_build_info).

import (
	"context"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
)

// BuildInfo names the running build in binlog_relay_build_info.
type BuildInfo struct {
	Version string // "dev" when empty
	// Commit is the VCS revision; empty: the one Go stamped into the binary
	// (vcs.revision, "-dirty" added for a modified tree), else "unknown".
	Commit string
}

func (b BuildInfo) resolved() BuildInfo {
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit != "" {
		return b
	}
	b.Commit = "unknown"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		b.Commit = rev
		if modified == "true" {
			b.Commit += "-dirty"
		}
	}
	return b
}

// leadership says whether this relay streams the binlog now: with
// ha.enabled while it holds the lease (a term), without it once the binlog
// path is built. changed is closed and replaced at every change.
type leadership struct {
	mu      sync.Mutex
	leading bool
	changed chan struct{}
}

func (l *leadership) set(v bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading == v {
		return
	}
	l.leading = v
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

func (l *leadership) is() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading
}

// state returns the current value and a channel closed at the next change.
func (l *leadership) state() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.leading, l.changed
}

// standby reports a relay with ha.enabled that does not hold the lease.
func (a *App) standby() bool { return a.Cfg.HA.Enabled && !a.leader.is() }

// leaderName is the holder of the lease as this relay last read it ("" when
// none, or without ha.enabled).
func (a *App) leaderName() string {
	if l := a.lease.Load(); l != nil {
		return l.Leader()
	}
	return ""
}

// endTerm is called when a term as HA leader ends. The relay goes back to
// waiting, so what only a streaming relay reports is dropped: a standby
// exporting its dead stream's lag, a source "down" or a stale checkpoint
// would page people about a relay that is doing its job. At shutdown they
// stay for the last scrape.
func (a *App) endTerm(ctx context.Context) {
	a.leader.set(false)
	if ctx.Err() != nil {
		return
	}
	a.ops.reader.Store(nil)
	a.ops.pub.Store(nil)
	a.Metrics().ForgetStream()
}

// whileLeading runs poll whenever this relay leads, cancelling it when the
// lead is lost, until ctx ends; after each stretch reset drops what it
// exported. Without ha.enabled poll just runs: that relay is the only one.
func (a *App) whileLeading(ctx context.Context, poll func(context.Context), reset func()) {
	if !a.Cfg.HA.Enabled {
		poll(ctx)
		return
	}
	for {
		leading, changed := a.leader.state()
		if leading {
			pctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				poll(pctx)
			}()
			select {
			case <-changed:
			case <-ctx.Done():
			}
			cancel()
			<-done
			reset()
		} else {
			select {
			case <-changed:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// serveLeader answers /leader: 200 on the relay that streams, 503 on the
// others, with who leads in the body.
func (a *App) serveLeader(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if a.leader.is() {
		_, _ = w.Write([]byte("leader\n"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	switch who := a.leaderName(); {
	case !a.Cfg.HA.Enabled:
		_, _ = w.Write([]byte("not leading: the binlog path is not running yet\n"))
	case who != "":
		_, _ = w.Write([]byte("standby: the leader is " + who + "\n"))
	default:
		_, _ = w.Write([]byte("standby: no relay named " + a.Cfg.Name + " holds the lease right now\n"))
	}
}

// standbyReady is /readyz on a standby: it serves its metrics and waits, so
// it is ready as long as it can reach Redis, where the lease is taken over.
func (a *App) standbyReady() (bool, []string) {
	if !a.ops.redisUp.Load() {
		return false, []string{"standby: redis " + a.Cfg.Redis.Addr + " does not answer, so this relay cannot take the leader lease over"}
	}
	return true, nil
}

// readyText is /readyz's status and body.
func (a *App) readyText() (int, string) {
	standby := a.standby()
	ok, why := a.Ready()
	switch {
	case ok && standby:
		if who := a.leaderName(); who != "" {
			return http.StatusOK, "ready: standby, waiting for the lease (the leader is " + who + ")\n"
		}
		return http.StatusOK, "ready: standby, waiting for the lease\n"
	case ok:
		return http.StatusOK, "ready\n"
	}
	return http.StatusServiceUnavailable, "not ready: " + strings.Join(why, "; ") + "\n"
}

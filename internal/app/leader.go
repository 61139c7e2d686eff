package app

// Leadership as the endpoints and metrics report it: which relay of a name
// streams the binlog now (/leader, binlog_relay_leader), what a standby
// reports, and the pollers only the leader runs.

import (
	"context"
	"sync"
)

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

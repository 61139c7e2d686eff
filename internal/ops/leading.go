package ops

// Leadership as the endpoints and metrics report it: which relay of a name
// streams the binlog now (/leader, binlog_relay_leader), and the pollers
// only the leader runs.

import (
	"context"
	"sync"
)

// Leading says whether this relay streams the binlog now: with ha.enabled
// while it holds the lease (a term), without it once the binlog path is
// built. changed is closed and replaced at every change. The zero value is
// not leading.
type Leading struct {
	mu      sync.Mutex
	leading bool
	changed chan struct{}
}

// Set records whether this relay leads now.
func (l *Leading) Set(v bool) {
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

// Is reports whether this relay leads now.
func (l *Leading) Is() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading
}

// state returns the current value and a channel closed at the next change.
func (l *Leading) state() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.leading, l.changed
}

// While runs poll whenever this relay leads, cancelling it when the lead
// is lost, until ctx ends; after each stretch reset drops what it
// exported.
func (l *Leading) While(ctx context.Context, poll func(context.Context), reset func()) {
	for {
		leading, changed := l.state()
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

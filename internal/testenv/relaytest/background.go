package relaytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Background is a blocking call (the relay's Run, the sweeper's Sweep) run
// in its own goroutine until Stop.
type Background struct {
	what   string
	within time.Duration
	cancel context.CancelFunc
	done   chan error // holds fn's result once it returned
	once   sync.Once
	err    error
}

// Go runs fn in the background. Stop cancels its context and waits up to
// within; what names it in the error when it does not stop.
func Go(what string, within time.Duration, fn func(context.Context) error) *Background {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Background{what: what, within: within, cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- fn(ctx) }()
	return b
}

// ErrStillRunning is in Stop's error when fn did not return in time.
var ErrStillRunning = errors.New("still running")

// Wait waits up to within for fn to return by itself (Stop is not
// called) and returns what it returned; exited is false if it still runs.
func (b *Background) Wait(within time.Duration) (exited bool, err error) {
	select {
	case err := <-b.done:
		b.done <- err // leave it for Stop
		return true, err
	case <-time.After(within):
		return b.Exited()
	}
}

// Exited reports whether fn has returned, and what it returned.
func (b *Background) Exited() (bool, error) {
	select {
	case err := <-b.done:
		b.done <- err // leave it for Stop
		return true, err
	default:
		return false, nil
	}
}

// Stop cancels fn, waits for it and returns its error; later calls return
// the same.
func (b *Background) Stop() error {
	b.once.Do(func() {
		b.cancel()
		select {
		case b.err = <-b.done:
		case <-time.After(b.within):
			b.err = fmt.Errorf("%s did not stop within %s: %w", b.what, b.within, ErrStillRunning)
		}
	})
	return b.err
}

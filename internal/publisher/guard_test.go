package publisher

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A publisher whose guard fails (the relay's lease ran out while it was
// paused) writes none of the jobs already queued in it when it wakes, and
// its Run ends with the guard's error (issue 37, item 5).
func TestGuardStopsQueuedMessages(t *testing.T) {
	f := newFakeBroker()
	e := fakeEnv{f}
	ex := e.bound(t)
	f.script = func(p fakePub) outcome {
		if p.msg.MessageId == "m-0001" {
			return outcome{kind: ack} // proves the exchange
		}
		return outcome{kind: withhold} // the answers the pause holds back
	}
	h := start(t, e, Config{Window: 2})
	errLease := errors.New("the lease is lost")
	var lost atomic.Bool
	h.p.SetGuard(func() error {
		if lost.Load() {
			return errLease
		}
		return nil
	})
	h.send(jobsTo(ex, ids("m", 6))...)
	published := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.published)
	}
	eventually(t, 5*time.Second, func() bool { return published() == 3 }, "published %d, want m1 and a window of 2", published())
	lost.Store(true)
	f.ackWithheld() // the leader wakes: the window has room again
	select {
	case err := <-h.done:
		h.done <- err
		if !errors.Is(err, errLease) {
			t.Fatalf("Run returned %v, want the guard's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end after the guard failed")
	}
	if n := published(); n != 3 {
		t.Fatalf("%d messages written, want 3: the jobs queued before the lease was lost were published after it", n)
	}
}

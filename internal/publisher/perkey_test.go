package publisher

import (
	"fmt"
	"testing"
	"time"
)

// Strict ordering per key (a lane of several): the window stays open for
// messages of different keys, a message of a key already unconfirmed waits,
// and a failed message is retried in place without a message of its own
// key overtaking it; results still come in job order.
func TestStrictPerKeyHoldsOnlyItsKey(t *testing.T) {
	f := newFakeBroker()
	e := fakeEnv{f}
	ex := e.bound(t)
	const n = 60
	keyOf := func(i int) uint64 { return uint64(i % 4) }
	f.script = func(p fakePub) outcome {
		if p.msg.MessageId == "m-0006" && p.attempt <= 2 {
			return outcome{kind: ret}
		}
		return outcome{kind: ack, delay: time.Millisecond}
	}
	h := start(t, e, Config{Strict: true, PerKey: true, Window: 16,
		HoldBackoff: HoldBackoff{Base: 5 * time.Millisecond, Max: 10 * time.Millisecond}})
	names := ids("m", n)
	jobs := jobsTo(ex, names)
	for i := range jobs {
		jobs[i].Key = keyOf(i + 1)
	}
	h.send(jobs...)
	rs := h.results(n)
	wantOrder(t, rs, names)
	wantErrs(t, rs, nil)

	f.mu.Lock()
	published := append([]fakePub(nil), f.published...)
	maxUnconf := f.maxUnconf
	f.mu.Unlock()
	if maxUnconf < 2 {
		t.Errorf("at most %d message unconfirmed: the window did not stay open for other keys", maxUnconf)
	}
	// Per key, publishes follow job order, and a message is published only
	// once the one before it of its key was routed.
	var num = func(id string) int { var i int; fmt.Sscanf(id, "m-%d", &i); return i }
	last := map[uint64]int{}
	for _, p := range published {
		i := num(p.msg.MessageId)
		k := keyOf(i)
		if i < last[k] {
			t.Fatalf("key %d: %s published after m-%04d", k, p.msg.MessageId, last[k])
		}
		last[k] = i
	}
	attempts := 0
	for _, p := range published {
		if p.msg.MessageId == "m-0006" {
			attempts++
		}
	}
	if attempts != 3 {
		t.Errorf("m-0006 published %d times, want 3 (two returns, then routed)", attempts)
	}
}

// Without PerKey, strict keeps one message in flight whatever the window.
func TestStrictWithoutPerKeyIsOneAtATime(t *testing.T) {
	c := Config{URL: amqpURL, Strict: true, Window: 64}
	c.Defaults()
	if c.Window != 1 {
		t.Errorf("strict window %d, want 1", c.Window)
	}
	c = Config{URL: amqpURL, Strict: true, PerKey: true, Window: 64}
	c.Defaults()
	if c.Window != 64 {
		t.Errorf("strict per-key window %d, want 64", c.Window)
	}
}

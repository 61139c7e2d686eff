package relay

import (
	"testing"
	"time"
)

// A flood of identical failures makes one line per interval, and the next
// line (or the flush) carries the count of the lines held back.
func TestThrottleOneLinePerKeyPerInterval(t *testing.T) {
	now := time.Unix(1000, 0)
	th := newThrottle(10 * time.Second)
	th.now = func() time.Time { return now }
	gone := throttleKey{table: "shop.outbox", exchange: "deleted", kind: "no_exchange"}
	other := throttleKey{table: "shop.outbox", exchange: "orders", kind: "returned"}

	written := 0
	for range 100_000 {
		if ok, _ := th.allow(gone); ok {
			written++
		}
	}
	if written != 1 {
		t.Fatalf("100,000 identical failures wrote %d lines in one interval, want 1", written)
	}
	// Another exchange or kind is not held back by the first.
	if ok, n := th.allow(other); !ok || n != 0 {
		t.Fatalf("a different key: allowed %v, suppressed %d; want a line of its own", ok, n)
	}

	now = now.Add(10 * time.Second)
	ok, n := th.allow(gone)
	if !ok || n != 99_999 {
		t.Fatalf("after the interval: allowed %v with %d held back, want true with 99999", ok, n)
	}

	// A burst that stops is reported by flush once its interval is over,
	// and only once.
	for range 5 {
		th.allow(gone)
	}
	var flushed []int
	th.flush(func(k throttleKey, n int) { flushed = append(flushed, n) })
	if len(flushed) != 0 {
		t.Fatalf("flush inside the interval reported %v", flushed)
	}
	now = now.Add(11 * time.Second)
	th.flush(func(k throttleKey, n int) {
		if k != gone {
			t.Errorf("flush reported %+v, which held nothing back", k)
		}
		flushed = append(flushed, n)
	})
	th.flush(func(k throttleKey, n int) { flushed = append(flushed, n) })
	if len(flushed) != 1 || flushed[0] != 5 {
		t.Fatalf("flush after the interval reported %v, want [5] once", flushed)
	}
}

// Keys idle for an interval are dropped when the map is full, so a stream of
// distinct failures cannot grow it without bound.
func TestThrottleMapStaysBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	th := newThrottle(time.Second)
	th.now = func() time.Time { return now }
	for i := range 10 * maxThrottleKeys {
		if i%maxThrottleKeys == 0 {
			now = now.Add(2 * time.Second)
		}
		th.allow(throttleKey{table: "t", exchange: string(rune('a' + i%26)), kind: string(rune(i))})
	}
	if n := len(th.keys); n > maxThrottleKeys {
		t.Fatalf("%d keys kept, want at most %d", n, maxThrottleKeys)
	}
}

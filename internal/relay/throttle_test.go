package relay

import (
	"fmt"
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
	if n := th.len(); n > maxThrottleKeys {
		t.Fatalf("%d keys kept, want at most %d", n, maxThrottleKeys)
	}
}

// Failures to 5,000 distinct exchanges inside one interval (none idle, so
// nothing could be pruned by age) keep the map at its bound, least recently
// used out; the lines the dropped keys held back come out of flush under
// exchange "other", so none is lost.
func TestThrottleBoundedUnderDistinctExchanges(t *testing.T) {
	now := time.Unix(1000, 0)
	th := newThrottle(time.Minute)
	th.now = func() time.Time { return now }
	const exchanges = 5000
	hot := throttleKey{table: "shop.outbox", exchange: "orders", kind: "returned"}
	written, peak := 0, 0
	for i := range exchanges {
		k := throttleKey{table: "shop.outbox", exchange: fmt.Sprintf("tenant-%d", i), kind: "no_exchange"}
		for range 3 { // one line, two held back
			if ok, _ := th.allow(k); ok {
				written++
			}
		}
		th.allow(hot) // used all along: never the least recently used
		peak = max(peak, th.len())
	}
	if peak > maxThrottleKeys {
		t.Fatalf("map peaked at %d keys, bound is %d", peak, maxThrottleKeys)
	}
	t.Logf("%d distinct exchanges: map peaked at %d keys", exchanges, peak)
	if written != exchanges {
		t.Errorf("%d lines written, want one per exchange (%d)", written, exchanges)
	}
	if _, ok := th.keys[hot]; !ok {
		t.Error("the most used key was evicted")
	}
	now = now.Add(time.Minute)
	held := 0
	th.flush(func(k throttleKey, n int) {
		if k.exchange == overflowExchange && k.kind != "no_exchange" {
			t.Errorf("overflow line %+v has the wrong kind", k)
		}
		if k != hot {
			held += n
		}
	})
	if held != 2*exchanges {
		t.Errorf("flush accounted for %d held-back lines, want %d", held, 2*exchanges)
	}
}

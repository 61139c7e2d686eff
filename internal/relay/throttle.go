package relay

import (
	"container/list"
	"sync"
	"time"
)

// throttle rate-limits repeated identical log lines: one line per key per
// interval, and the lines it held back are counted and reported with the
// next line for that key (or by flush once the interval is over). A backlog
// of rows to one deleted exchange then costs a line per interval, not one
// per row.
//
// Keys carry the exchange, which comes from row data, so the map is bounded:
// at most maxThrottleKeys keys, the least recently used dropped first. The
// lines a dropped key still held back are not lost: they are added to an
// overflow count per (table, kind) that flush reports under the exchange
// "other", as the metrics do.
type throttle struct {
	every time.Duration
	now   func() time.Time
	max   int

	mu       sync.Mutex
	keys     map[throttleKey]*list.Element // values are *throttleState
	order    *list.List                    // front: most recently used
	overflow map[throttleKey]int           // exchange "other"; one per table and kind
}

// throttleKey is what makes two lines "the same": table, exchange and the
// kind of failure (not the message id, which differs on every row).
type throttleKey struct {
	table, exchange, kind string
}

type throttleState struct {
	key        throttleKey
	last       time.Time // when a line was last let through
	suppressed int       // lines held back since then
}

// maxThrottleKeys bounds the map.
const maxThrottleKeys = 1024

// overflowExchange names, in a flushed line, the keys dropped from the map.
const overflowExchange = "other"

func newThrottle(every time.Duration) *throttle {
	return &throttle{every: every, now: time.Now, max: maxThrottleKeys,
		keys: map[throttleKey]*list.Element{}, order: list.New(), overflow: map[throttleKey]int{}}
}

// allow reports whether a line for k may be written now and, if so, how
// many lines for k were held back before it.
func (t *throttle) allow(k throttleKey) (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	el := t.keys[k]
	if el == nil {
		t.keys[k] = t.order.PushFront(&throttleState{key: k, last: now})
		for t.order.Len() > t.max {
			t.evictLocked(t.order.Back())
		}
		return true, 0
	}
	t.order.MoveToFront(el)
	s := el.Value.(*throttleState)
	if now.Sub(s.last) < t.every {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	return true, n
}

func (t *throttle) evictLocked(el *list.Element) {
	s := el.Value.(*throttleState)
	t.order.Remove(el)
	delete(t.keys, s.key)
	if s.suppressed > 0 {
		t.overflow[throttleKey{table: s.key.table, exchange: overflowExchange, kind: s.key.kind}] += s.suppressed
	}
}

// flush reports, through emit, the keys whose interval is over with lines
// still held back, so a burst that stops is still accounted for, and the
// held-back lines of keys dropped from the map.
func (t *throttle) flush(emit func(k throttleKey, suppressed int)) {
	t.mu.Lock()
	now := t.now()
	var due []throttleKey
	var counts []int
	for el := t.order.Front(); el != nil; el = el.Next() {
		s := el.Value.(*throttleState)
		if s.suppressed > 0 && now.Sub(s.last) >= t.every {
			due, counts = append(due, s.key), append(counts, s.suppressed)
			s.last, s.suppressed = now, 0
		}
	}
	for k, n := range t.overflow {
		due, counts = append(due, k), append(counts, n)
	}
	clear(t.overflow)
	t.mu.Unlock()
	for i, k := range due {
		emit(k, counts[i])
	}
}

// len is how many keys are held (for tests of the bound).
func (t *throttle) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Len()
}

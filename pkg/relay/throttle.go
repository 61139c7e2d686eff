package relay

import (
	"sync"
	"time"
)

// throttle rate-limits repeated identical log lines: one line per key per
// interval, and the lines it held back are counted and reported with the
// next line for that key (or by flush once the interval is over). A backlog
// of rows to one deleted exchange then costs a line per interval, not one
// per row.
type throttle struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[throttleKey]*throttleState
}

// throttleKey is what makes two lines "the same": table, exchange and the
// kind of failure (not the message id, which differs on every row).
type throttleKey struct {
	table, exchange, kind string
}

type throttleState struct {
	last       time.Time // when a line was last let through
	suppressed int       // lines held back since then
}

// maxThrottleKeys bounds the map: keys idle for a whole interval are
// dropped when it grows past this.
const maxThrottleKeys = 1024

func newThrottle(every time.Duration) *throttle {
	return &throttle{every: every, now: time.Now, keys: map[throttleKey]*throttleState{}}
}

// allow reports whether a line for k may be written now and, if so, how
// many lines for k were held back before it.
func (t *throttle) allow(k throttleKey) (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	s := t.keys[k]
	if s == nil {
		if len(t.keys) >= maxThrottleKeys {
			t.pruneLocked(now)
		}
		t.keys[k] = &throttleState{last: now}
		return true, 0
	}
	if now.Sub(s.last) < t.every {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	return true, n
}

// flush reports, through emit, the keys whose interval is over with lines
// still held back, so a burst that stops is still accounted for.
func (t *throttle) flush(emit func(k throttleKey, suppressed int)) {
	t.mu.Lock()
	now := t.now()
	var due []throttleKey
	var counts []int
	for k, s := range t.keys {
		if s.suppressed > 0 && now.Sub(s.last) >= t.every {
			due, counts = append(due, k), append(counts, s.suppressed)
			s.last, s.suppressed = now, 0
		}
	}
	t.mu.Unlock()
	for i, k := range due {
		emit(k, counts[i])
	}
}

func (t *throttle) pruneLocked(now time.Time) {
	for k, s := range t.keys {
		if s.suppressed == 0 && now.Sub(s.last) >= t.every {
			delete(t.keys, k)
		}
	}
}

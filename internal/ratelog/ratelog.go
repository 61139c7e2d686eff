// Package ratelog owns holding back a log line that repeats: a line is let
// through at most once per interval per key, the repeats in between are
// counted, and the next line let through says how many there were. What
// makes a key and what the line says stay with the caller.
package ratelog

import (
	"sync"
	"time"
)

// Limiter lets a line through at most once per interval per key. It is
// safe for concurrent use.
type Limiter struct {
	every time.Duration
	keys  int

	mu   sync.Mutex
	seen map[string]*repeat
}

type repeat struct {
	last       time.Time // when the key was last let through
	suppressed int       // held back since
}

// New returns a Limiter that lets each key through once per every and
// remembers at most keys distinct keys: past that it forgets them all
// (bounded; at worst a repeat is logged early).
func New(every time.Duration, keys int) *Limiter {
	return &Limiter{every: every, keys: keys, seen: map[string]*repeat{}}
}

// Allow reports whether the line of key may be logged at now and, when it
// may, how many times it was held back since it last was.
func (l *Limiter) Allow(key string, now time.Time) (repeated int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.seen[key]
	if r != nil && now.Sub(r.last) < l.every {
		r.suppressed++
		return 0, false
	}
	if r == nil {
		if len(l.seen) >= l.keys {
			clear(l.seen)
		}
		r = &repeat{}
		l.seen[key] = r
	}
	repeated = r.suppressed
	r.last, r.suppressed = now, 0
	return repeated, true
}

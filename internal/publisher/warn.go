package publisher

import (
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// warnLimiter logs a warning at most once per interval per distinct line
// (message and fields); the repeats in between are counted and the next
// line that gets through says how many there were. A backlog of rows to a
// missing exchange then costs a line every few seconds, not one per row.
type warnLimiter struct {
	log      *zap.Logger
	interval time.Duration
	now      func() time.Time
	mu       sync.Mutex
	seen     map[string]*warnState
}

type warnState struct {
	last       time.Time
	suppressed int
}

const maxWarnKeys = 1024

func newWarnLimiter(log *zap.Logger, interval time.Duration) *warnLimiter {
	return &warnLimiter{log: log, interval: interval, now: time.Now, seen: map[string]*warnState{}}
}

func (w *warnLimiter) warn(msg string, fields ...zap.Field) {
	key := lineKey(msg, fields)
	now := w.now()
	w.mu.Lock()
	st := w.seen[key]
	if st != nil && now.Sub(st.last) < w.interval {
		st.suppressed++
		w.mu.Unlock()
		return
	}
	if st == nil {
		if len(w.seen) >= maxWarnKeys {
			clear(w.seen) // bounded; at worst a repeat is logged early
		}
		st = &warnState{}
		w.seen[key] = st
	}
	repeated := st.suppressed
	st.last, st.suppressed = now, 0
	w.mu.Unlock()
	if repeated > 0 {
		fields = append(fields, zap.Int("repeated", repeated))
	}
	w.log.Warn(msg, fields...)
}

// lineKey identifies a line by its message and its string and error
// fields; numbers (counts, a growing backoff) are left out so that they do
// not make every line distinct.
func lineKey(msg string, fields []zap.Field) string {
	var b strings.Builder
	b.WriteString(msg)
	for _, f := range fields {
		switch f.Type {
		case zapcore.StringType:
			b.WriteString("|" + f.Key + "=" + f.String)
		case zapcore.ErrorType:
			if e, ok := f.Interface.(error); ok {
				b.WriteString("|" + f.Key + "=" + e.Error())
			}
		}
	}
	return b.String()
}

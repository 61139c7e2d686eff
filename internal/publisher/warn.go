package publisher

import (
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/binlog-relay/binlog-relay/internal/ratelog"
)

// warnLimiter logs a warning at most once per interval per distinct line
// (message and fields); the repeats in between are counted and the next
// line that gets through says how many there were. A backlog of rows to a
// missing exchange then costs a line every few seconds, not one per row.
type warnLimiter struct {
	log   *zap.Logger
	now   func() time.Time
	lines *ratelog.Limiter
}

const maxWarnKeys = 1024

func newWarnLimiter(log *zap.Logger, interval time.Duration) *warnLimiter {
	return &warnLimiter{log: log, now: time.Now, lines: ratelog.New(interval, maxWarnKeys)}
}

func (w *warnLimiter) warn(msg string, fields ...zap.Field) {
	repeated, ok := w.lines.Allow(lineKey(msg, fields), w.now())
	if !ok {
		return
	}
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

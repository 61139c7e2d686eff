package redisconn

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/ratelog"
)

// redisLogger carries go-redis's own messages (a dial that failed, a
// connection pool problem) into the relay's zap log: by default go-redis
// prints plain-text lines on stderr, in the middle of the JSON stream.
// go-redis repeats a message on every attempt (about five a second while
// Redis is down), and the relay already logs the outage itself once when
// it begins and once when it ends; so a message is logged once per
// redisRepeatEvery, and the next line says how many were left out.
type redisLogger struct {
	log   *zap.Logger
	every time.Duration
	now   func() time.Time
	lines *ratelog.Limiter
}

const redisRepeatEvery = time.Minute

func newRedisLogger(log *zap.Logger, every time.Duration) *redisLogger {
	// At most 100 distinct messages are remembered: keep the map small.
	return &redisLogger{log: log, every: every, now: time.Now, lines: ratelog.New(every, 100)}
}

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	suppressed, ok := l.lines.Allow(msg, l.now())
	if !ok {
		return
	}
	if suppressed > 0 {
		l.log.Warn(msg, zap.Int("repeated", suppressed), zap.Duration("since", l.every))
		return
	}
	l.log.Warn(msg)
}

// RouteLogs sends go-redis's messages to log. go-redis has one logger
// per process, so the last App opened owns it.
func RouteLogs(log *zap.Logger) {
	redis.SetLogger(newRedisLogger(log.Named("redis"), redisRepeatEvery))
}

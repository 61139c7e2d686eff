package redisconn

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
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

	mu   sync.Mutex
	seen map[string]*redisRepeat
}

type redisRepeat struct {
	logged     time.Time
	suppressed int
}

const redisRepeatEvery = time.Minute

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	now := l.now()
	l.mu.Lock()
	r := l.seen[msg]
	if r != nil && now.Sub(r.logged) < l.every {
		r.suppressed++
		l.mu.Unlock()
		return
	}
	if r == nil {
		if len(l.seen) > 100 { // distinct messages: keep the map small
			clear(l.seen)
		}
		r = &redisRepeat{}
		l.seen[msg] = r
	}
	suppressed := r.suppressed
	r.logged, r.suppressed = now, 0
	l.mu.Unlock()
	if suppressed > 0 {
		l.log.Warn(msg, zap.Int("repeated", suppressed), zap.Duration("since", l.every))
		return
	}
	l.log.Warn(msg)
}

// RouteLogs sends go-redis's messages to log. go-redis has one logger
// per process, so the last App opened owns it.
func RouteLogs(log *zap.Logger) {
	redis.SetLogger(&redisLogger{log: log.Named("redis"), every: redisRepeatEvery, now: time.Now, seen: map[string]*redisRepeat{}})
}

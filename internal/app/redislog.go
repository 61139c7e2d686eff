package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// redisLogger carries go-redis's own messages (a dial that failed, a
// connection pool problem) into the relay's zap log: by default go-redis
// prints plain-text lines on stderr, in the middle of the JSON stream.
type redisLogger struct{ log *zap.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn(strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}

// routeRedisLogs sends go-redis's messages to log. go-redis has one logger
// per process, so the last App opened owns it.
func routeRedisLogs(log *zap.Logger) {
	redis.SetLogger(redisLogger{log: log.Named("redis")})
}

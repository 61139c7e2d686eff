package streamlane

import (
	"fmt"
	"sync"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/logs"
	"go.uber.org/zap"
)

// The stream client logs through one process-wide logger (pkg/logs, the
// standard library's log by default, printing to stderr). The first lane
// built sends it to its zap logger instead, named stream-client, with every
// lane's URI passwords cut out of each line: the client's lines name hosts
// and users, and nothing proves a future one never quotes a URI whole.
var clientLog struct {
	once    sync.Once
	mu      sync.Mutex
	secrets []string
}

func installClientLog(log *zap.Logger, secrets []string) {
	clientLog.mu.Lock()
	clientLog.secrets = append(clientLog.secrets, secrets...)
	clientLog.mu.Unlock()
	clientLog.once.Do(func() { logs.SetLogger(zapClientLog{log.Named("stream-client").WithOptions(zap.AddCallerSkip(2))}) })
}

type zapClientLog struct{ log *zap.Logger }

func (z zapClientLog) line(format string, v []any) string {
	clientLog.mu.Lock()
	defer clientLog.mu.Unlock()
	return scrubText(fmt.Sprintf(format, v...), clientLog.secrets)
}

// Info lines of the client are about its own bookkeeping (a producer
// closing, inflight messages waited for): debug here.
func (z zapClientLog) Info(format string, v ...any) { z.log.Debug(z.line(format, v)) }
func (z zapClientLog) Debug(format string, v ...any) {
	if z.log.Core().Enabled(zap.DebugLevel) {
		z.log.Debug(z.line(format, v))
	}
}
func (z zapClientLog) Warn(format string, v ...any)  { z.log.Warn(z.line(format, v)) }
func (z zapClientLog) Error(format string, v ...any) { z.log.Warn(z.line(format, v)) }

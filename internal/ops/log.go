package ops

import (
	"fmt"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"

	"github.com/binlog-relay/binlog-relay/internal/config"
)

// NewLogger builds the zap logger the config asks for.
func NewLogger(c config.Log) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	zc := zap.NewProductionConfig()
	if c.Format == "console" {
		zc = zap.NewDevelopmentConfig()
	}
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.Sampling = nil
	zc.OutputPaths = []string{"stderr"}
	return zc.Build()
}

// SlogOf hands a zap logger to the public packages, which log through
// log/slog: the records go to l's core under l's name, so they read like
// the rest of the relay's lines.
func SlogOf(l *zap.Logger) *slog.Logger {
	return slog.New(zapslog.NewHandler(l.Core(), zapslog.WithName(l.Name()), zapslog.WithCaller(true)))
}

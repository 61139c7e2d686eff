package app

import (
	"fmt"
	"log/slog"

	"go.uber.org/zap"
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

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

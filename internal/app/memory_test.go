package app

import (
	"math"
	"runtime/debug"
	"testing"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
)

// The soft memory limit follows relay.max_inflight_bytes, never raises a
// lower limit already set, and leaves GOMEMLIMIT alone.
func TestMemoryLimitFollowsTheByteBudget(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	app := func(budget int64) *App {
		cfg := &config.Config{Relay: config.Relay{MaxInflightBytes: budget}}
		s, _ := newStages(cfg) // the relay's Config, whatever the rest lacks
		return &App{Cfg: cfg, Log: zap.NewNop(), stages: s}
	}

	debug.SetMemoryLimit(math.MaxInt64)
	app(64 << 20).setMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != 192<<20 {
		t.Fatalf("limit %d with a 64 MiB budget, want 192 MiB", got)
	}
	app(256 << 20).setMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != 192<<20 {
		t.Fatalf("a larger budget raised the limit to %d", got)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "1GiB")
	app(64 << 20).setMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit %d set although GOMEMLIMIT is", got)
	}
}

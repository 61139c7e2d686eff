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
	set := func(budget int64) {
		cfg := &config.Config{Relay: config.Relay{MaxInflightBytes: budget}}
		s, _ := newStages(cfg) // the relay's Config, whatever the rest lacks
		setMemoryLimit(s.relay.MaxInflightBytes, zap.NewNop())
	}

	debug.SetMemoryLimit(math.MaxInt64)
	set(64 << 20)
	if got := debug.SetMemoryLimit(-1); got != 192<<20 {
		t.Fatalf("limit %d with a 64 MiB budget, want 192 MiB", got)
	}
	set(256 << 20)
	if got := debug.SetMemoryLimit(-1); got != 192<<20 {
		t.Fatalf("a larger budget raised the limit to %d", got)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "1GiB")
	set(64 << 20)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit %d set although GOMEMLIMIT is", got)
	}
}

package app

import (
	"os"
	"runtime/debug"

	"go.uber.org/zap"
)

// memoryLimitFor is the Go runtime's soft memory limit for a relay whose
// rows in flight are bounded by budget bytes: the budget, as much again for
// the rows being read and decoded ahead of it (each large row is copied a
// few times on its way: packet, decoded value, message body), and 64 MiB
// for the rest of the process.
func memoryLimitFor(budget int64) int64 { return 2*budget + 64<<20 }

// setMemoryLimit makes the garbage collector keep the heap near what the
// byte budget (relay.max_inflight_bytes) allows. Without it the collector lets garbage grow to the size
// of the live heap again before it runs, and a backlog of 1 MiB payloads
// leaves a peak RSS several times the budget. GOMEMLIMIT, when set, wins.
func setMemoryLimit(budget int64, log *zap.Logger) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return
	}
	limit := memoryLimitFor(budget)
	if cur := debug.SetMemoryLimit(-1); cur < limit {
		return // a lower limit was set already (another relay in this process)
	}
	debug.SetMemoryLimit(limit)
	log.Debug("Go memory limit set from relay.max_inflight_bytes", zap.Int64("bytes", limit))
}

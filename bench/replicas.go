package main

// The primary's other replicas (-extra-replica-dsns, the stack's second
// replica, there for failover tests) have their replication paused during
// the measurements, so only the replica the relay reads shares the cores;
// they catch up between steps and are resumed at the end.

import (
	"context"
	"database/sql"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// pausedReplicas are the extra replicas, their replication paused.
type pausedReplicas []*sql.DB

// pauseReplicas opens each extra replica and pauses its replication. One
// that cannot be reached or paused is left out, with a progress line.
func pauseReplicas(ctx context.Context, dsns []string) pausedReplicas {
	var r pausedReplicas
	for _, dsn := range dsns {
		db, err := openDB(dsn, "", nil)
		if err != nil {
			progress("extra replica %s not used: %v", redactDSN(dsn), err)
			continue
		}
		// STOP/START REPLICA: MariaDB 10.5+, MySQL 8.0.22+.
		if _, err := db.ExecContext(ctx, testenv.StopReplicaSQL); err != nil {
			progress("extra replica %s not paused: %v", redactDSN(dsn), err)
			_ = db.Close()
			continue
		}
		progress("extra replica %s: replication paused for the run", redactDSN(dsn))
		r = append(r, db)
	}
	return r
}

// resumeExtras starts the paused replicas' replication again and waits up
// to 15 s for them to catch up with the primary; past that they go on
// catching up in the background (the tests that read the second replica
// wait for it themselves), so the bench's wall time stays its own.
func (e *env) resumeExtras() {
	if len(e.extras) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	var pos string
	if e.primary != nil {
		pos, _ = e.primaryPos(ctx)
	}
	e.extras.replicate(ctx, pos, 15*time.Second, false)
}

// catchUp lets the paused replicas apply what the primary logged up to pos
// (at most max), then pauses them again. It runs between steps, so they
// replay each step's binary log outside the measurements instead of all of
// it at the end: the primary's logs can then be purged as the run goes (a
// paused replica holds the primary's oldest file), and a machine's next
// `make test` does not start with a second replica minutes behind.
func (r pausedReplicas) catchUp(ctx context.Context, pos string, max time.Duration) {
	r.replicate(ctx, pos, max, true)
}

// replicate starts the extra replicas' replication, waits up to max for
// each to reach pos, and with pause stops it again.
func (r pausedReplicas) replicate(ctx context.Context, pos string, max time.Duration, pause bool) {
	for _, db := range r {
		if _, err := db.ExecContext(ctx, testenv.StartReplicaSQL); err != nil {
			progress("extra replica: resuming replication: %v (scripts/stack.sh up resumes it)", err)
			continue
		}
		if pos != "" {
			start := time.Now()
			if err := waitApplied(ctx, db, pos, max); err != nil {
				progress("extra replica: not caught up with %s after %s (%v); it goes on in the background", pos, time.Since(start).Round(time.Second), err)
			} else if d := time.Since(start); d > 5*time.Second {
				progress("extra replica: caught up with the primary in %s", d.Round(time.Second))
			}
		}
		if !pause {
			continue
		}
		if _, err := db.ExecContext(ctx, testenv.StopReplicaSQL); err != nil {
			progress("extra replica: pausing replication again: %v", err)
		}
	}
}

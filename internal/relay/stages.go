package relay

import (
	"context"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The stages around the pipeline are reached through these interfaces, each
// holding only the methods the relay calls, so the pipeline runs over fakes
// in its unit tests (fakes_test.go) and over the real reader, publishers
// (Lane), status writer and checkpoint store in the binary.

// Reader streams binlog events from a position, stopping at a transaction
// boundary when ctx ends (binlog.Reader).
type Reader interface {
	Run(ctx context.Context, start binlog.Position, out chan<- binlog.Event) error
	Connected() bool
}

// Marker records the outcome of published rows in their outbox table: SENT,
// or back to the retry path (rowstatus.Writer).
type Marker interface {
	MarkSent(ctx context.Context, t *outbox.Table, m rowstatus.Marks) (int64, error)
	MarkRetryMany(ctx context.Context, t *outbox.Table, a rowstatus.Attempt, m rowstatus.Marks) (rowstatus.Outcome, int64, error)
}

// CheckpointStore saves the position the relay resumes from
// (checkpoint.Store; loading it is the caller's, before Run).
type CheckpointStore interface {
	Save(ctx context.Context, c checkpoint.Checkpoint) error
}

// SentLookup tells, of some rows of a table, which are SENT now, reading the
// source replica (rowstatus.SentReader): keyed by colval.ValueString of the id, with the
// row's rowstatus.Fingerprint (its message id, or its payload's CRC32).
type SentLookup interface {
	Sent(ctx context.Context, t *outbox.Table, ids []any) (map[string]string, error)
}

// A SentLookup that is also a ReplicaCatchUp is asked, before the first read
// of each Run, to wait until the source replica has applied what the primary
// had logged by then: the marks the run before made just ahead of its end
// are then SENT on the replica when the check reads it, and those rows are
// not published again (rowstatus.SentReader). An error or a replica that
// does not catch up within the wait only means more duplicates. It
// returns, when it could read the primary's position, after: whether a
// commit is outside that position, so was committed after the Run started
// and never read by a run before; the check ends at the first such commit.
type ReplicaCatchUp interface {
	CatchUp(ctx context.Context, within time.Duration) (after func(binlog.Commit) bool, err error)
}

package relay

import (
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Observer is told what the pipeline does, for metrics. Calls come from the
// last stage (the committer and the recorder), in binlog order;
// implementations must be cheap (they run per row).
type Observer interface {
	// Published: confirmed and routed. confirm is publish-to-confirm time;
	// sinceCommit is from the source's commit timestamp (second precision).
	Published(t *outbox.Table, exchange string, confirm, sinceCommit time.Duration)
	// Failed: the row went to the retry path or FAILED.
	Failed(t *outbox.Table, exchange string, reason error)
	// DeadLettered: a row of a table without a status column went to the
	// dead-letter exchange instead of exchange (empty when it could not be
	// routed), for reason.
	DeadLettered(t *outbox.Table, exchange, reason string)
	// Marked: n rows moved to SENT in one statement.
	Marked(t *outbox.Table, n int64)
	// AlreadySent: n rows published and marked in that statement were no
	// longer pending (a replay of rows a killed run had marked, or rows the
	// sweeper sent): duplicates.
	AlreadySent(t *outbox.Table, n int64)
	// ReplaySkipped: n rows read at the start of a Run were SENT already and
	// were not published again. Called from the routing stage.
	ReplaySkipped(t *outbox.Table, n int64)
	// Checkpointed: a checkpoint was saved.
	Checkpointed(cp checkpoint.Checkpoint)
}

type nopObserver struct{}

func (nopObserver) Published(*outbox.Table, string, time.Duration, time.Duration) {}
func (nopObserver) Failed(*outbox.Table, string, error)                           {}
func (nopObserver) DeadLettered(*outbox.Table, string, string)                    {}
func (nopObserver) Marked(*outbox.Table, int64)                                   {}
func (nopObserver) AlreadySent(*outbox.Table, int64)                              {}
func (nopObserver) ReplaySkipped(*outbox.Table, int64)                            {}
func (nopObserver) Checkpointed(checkpoint.Checkpoint)                            {}

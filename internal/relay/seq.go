package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// Publishing ids. Every row the stream reads takes the next number of one
// sequence, in binlog order, and a commit carries the number its last row
// took; the checkpoint saves the number at its position (with SeqScope).
// A Run that starts at a saved checkpoint starts from its number, so the
// rows it replays take the ids they took before, and a RabbitMQ stream lane
// (whose broker keeps the last id per producer) drops the ones it stored
// already. A Run that starts anywhere else (no checkpoint, a jump past a
// purged position, a checkpoint saved under another scope) cannot know the
// ids rows took before: it starts above every id this process gave and the
// floor the caller raised (the broker's last stored id), so nothing is
// dropped, at worst a duplicate is published; it saves its start position
// with the new numbering before it publishes anything (saveNewNumbering).

// ResumeFrom tells the next Run that start position cp.Position() is the
// checkpoint cp, with the publishing id it saved.
func (r *Relay) ResumeFrom(cp checkpoint.Checkpoint) {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	r.resume = &cp
}

// RaiseSeqFloor makes the next Run that cannot resume a saved sequence
// start its publishing ids above n.
func (r *Relay) RaiseSeqFloor(n uint64) { r.raiseSeqFloor(n) }

func (r *Relay) raiseSeqFloor(n uint64) {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	r.seqFloor = max(r.seqFloor, n)
}

// startSeq is the publishing id the rows from start come after, and
// whether it resumes a saved checkpoint's numbering.
func (r *Relay) startSeq(start binlog.Position) (uint64, bool) {
	if c := r.savedAt(start, true); c != nil {
		return c.Seq, true
	}
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	return r.seqFloor, false
}

// startReach is how many rows past start the run that saved start as its
// checkpoint had read and handled (checkpoint.Checkpoint.Reach): the
// replay check looks that far at least. 0 when unknown.
func (r *Relay) startReach(start binlog.Position) uint64 {
	if c := r.savedAt(start, false); c != nil {
		return c.Reach
	}
	return 0
}

// savedAt is the checkpoint at start this process saved last or was told
// to resume from (under this relay's seq_scope only, when scoped), or nil.
func (r *Relay) savedAt(start binlog.Position, scoped bool) *checkpoint.Checkpoint {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	for _, c := range []*checkpoint.Checkpoint{r.lastSaved.Load(), r.resume} {
		if c != nil && c.Position() == start && (!scoped || c.SeqScope == r.cfg.SeqScope) {
			return c
		}
	}
	return nil
}

// saveNewNumbering saves start as the checkpoint, with seq and the scope,
// before a Run that starts a new numbering publishes anything. Without it
// a checkpoint of the old scope stays the last one saved until the new
// Run saves its first: a crash before that, and a start under the old
// scope again (a setting changed back), would resume the old ids below
// those the new Run had the broker store, and rows would be dropped as
// duplicates.
func (r *Relay) saveNewNumbering(ctx context.Context, start binlog.Position, seq uint64) error {
	cp := r.checkpointAt(start)
	cp.Seq, cp.SeqScope = seq, r.cfg.SeqScope
	// Retried until the store answers, as a save past the outage window
	// is: nothing is published meanwhile. A fenced save (the lease lost)
	// ends the Run.
	if err := retry(ctx, r.log, "saving the checkpoint of a new publishing-id numbering", func() error {
		cp.SavedAt = time.Now().UTC()
		return r.store.Save(ctx, cp)
	}); err != nil {
		return fmt.Errorf("saving the checkpoint of a new publishing-id numbering (seq_scope %s): %w", r.cfg.SeqScope, err)
	}
	r.lastSaved.Store(&cp)
	r.Stats.Checkpoints.Add(1)
	return nil
}

package relay

import (
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
// dropped, at worst a duplicate is published.

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

// startSeq is the publishing id the rows from start come after.
func (r *Relay) startSeq(start binlog.Position) uint64 {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	for _, c := range []*checkpoint.Checkpoint{r.lastSaved.Load(), r.resume} {
		if c != nil && c.Position() == start && c.SeqScope == r.cfg.SeqScope {
			return c.Seq
		}
	}
	return r.seqFloor
}

package relay

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// A Run starts at a checkpoint, and a checkpoint is behind the point the run
// before it had reached: after a crash, a failover or a lost lease, the rows
// between were published, and most of them marked SENT on the primary, which
// the source replica shows by the time they are read again. replayCheck asks
// the replica, one indexed read per table and chunk of ids, which of the rows
// read at the start of a Run are SENT already, and those are not published
// again. It checks from the start of each Run until a chunk holds no row
// that is SENT past the rows the run before had handled (the stream is
// past what it had marked), or a table marked by id alone is renamed, then
// steps aside for the rest of the Run.
//
// A row found SENT, under the same message (rowstatus.Fingerprint), was
// confirmed by the broker before it was marked, so not publishing it again
// loses nothing. A row confirmed but not marked yet is published again:
// those are the only duplicates left. A table without a status column, a
// row its own transaction deleted, or a read that fails (the warning says
// so) keeps the old behaviour: the row is published.
//
// A table without a message-id column of its own (local_message) is marked
// by id alone, and a mark written by name after the primary renamed the
// table away (rename.go) lands on the new table's row with that id: SENT,
// never published. The rename comes before that row in the binlog, and the
// check ends there. A table truncated, or dropped and made again, while
// marks are in flight is the case left: its ids start again at 1, and only
// a row with a small id, inserted in the seconds a mark may wait after the
// truncate, meets a mark of the same id.
type replayCheck struct {
	r      *Relay
	lookup SentLookup
	active bool
	// skip holds the rows of the chunk being routed that are SENT.
	skip map[*outbox.Row]bool
	// txKeys are the rows (table and id) read in the transaction so far: a
	// row that comes again in its transaction is the committed version of
	// one the reader sent early (a transaction past its hold), and is never
	// skipped, SENT or not: the early version's mark says nothing of it.
	txKeys map[string]bool
	// reach is how many rows the run before had read past the start and
	// handled (checkpoint.Checkpoint.Reach); read counts the rows read.
	reach, read uint64
	// after tells a commit made after this Run started (ReplicaCatchUp):
	// nil when the primary's position could not be read.
	after func(binlog.Commit) bool
	// unsent counts the checkable rows read in a row, past the reach,
	// that were not SENT; past runLimit of them the check ends.
	unsent, runLimit int
	// The Run's totals, logged once when the check ends.
	checked, skipped, reads int
	began                   time.Time
	// waited is how long the Run waited for the replica before its first
	// read (catchUp): the part of took spent on the replica's delay.
	waited time.Duration
}

const (
	// replayChunk is the most rows one check gathers (and one read names).
	replayChunk = 500
	// replayGather is how long a check waits for the chunk to fill while the
	// reader is behind; the rows wait that long at most.
	replayGather = 20 * time.Millisecond
	// replayReadTimeout bounds one read on the replica: a replica that does
	// not answer ends the check, and the rows are published.
	replayReadTimeout = 5 * time.Second
	// replayCatchUp is the most a Run waits, before its first read, for the
	// replica to apply the primary's marks (ReplicaCatchUp).
	replayCatchUp = 3 * time.Second
)

func (r *Relay) newReplayCheck() *replayCheck {
	return &replayCheck{r: r, lookup: r.cfg.Sent, active: r.cfg.Sent != nil, skip: map[*outbox.Row]bool{},
		txKeys: map[string]bool{}, began: time.Now(), runLimit: r.cfg.MaxUnmarked}
}

// checkable: the row could have been published and marked by a run before.
func checkable(row *outbox.Row) bool {
	return row.Table.Columns.Status != "" && !row.Deleted
}

// next returns ev and, while the check is on, what it gathered after ev (a
// chunk, from a row), checked: the events route handles next, in order.
// An event between chunks (a commit, a rename) is checked alone: a rename
// or a commit made after the start ends the check wherever it falls.
func (c *replayCheck) next(ctx context.Context, ev binlog.Event, events <-chan binlog.Event) []binlog.Event {
	evs := []binlog.Event{ev}
	if !c.active {
		return evs
	}
	if ev.Kind == binlog.KindRow {
		evs = c.gather(ctx, ev, events)
	}
	c.check(ctx, evs)
	return evs
}

// gather returns first with the events that follow it, until the chunk holds
// replayChunk rows, the reader has had replayGather to bring more, or events
// is closed.
func (c *replayCheck) gather(ctx context.Context, first binlog.Event, events <-chan binlog.Event) []binlog.Event {
	evs, rows := []binlog.Event{first}, 1
	timer := time.NewTimer(replayGather)
	defer timer.Stop()
	for rows < replayChunk {
		select {
		case ev, ok := <-events:
			if !ok {
				return evs
			}
			evs = append(evs, ev)
			if ev.Kind == binlog.KindRow {
				rows++
			}
		case <-timer.C:
			return evs
		case <-ctx.Done():
			return evs
		}
	}
	return evs
}

// check asks the replica which rows of evs are SENT, and ends the check when
// none is (or the replica cannot tell).
func (c *replayCheck) check(ctx context.Context, evs []binlog.Event) {
	clear(c.skip)
	byTable := map[*outbox.Table][]*outbox.Row{}
	var order []*outbox.Table
	// The rows asked about in binlog order, each with its count among the
	// rows read.
	type asked struct {
		row  *outbox.Row
		read uint64
	}
	var inOrder []asked
	renamed := false // a rename ends the check
	later := false   // a commit made after the Run started ends it
	rows := false    // the chunk holds a row (else: an event between chunks)
	for _, ev := range evs {
		if ev.Kind == binlog.KindCommit {
			clear(c.txKeys)
			if c.after != nil && c.after(ev.Commit) {
				later = true
			}
		}
		if ev.Kind == binlog.KindRow {
			c.read++ // as route numbers them (seq)
			rows = true
		}
		if ev.Kind == binlog.KindRename && !rowstatus.OwnMessageID(ev.Rename.Table) {
			// A table renamed away (an archival rotation) while the run
			// before marked its rows by name and by id alone: a mark it
			// wrote before its reader came here landed on the new table's
			// row under the same id, never published. From here the replica's
			// SENT says nothing of the rows read.
			renamed = true
			break
		}
		if ev.Kind != binlog.KindRow || !checkable(ev.Row) || later {
			continue // (a row after a commit made since the start: not asked)
		}
		t := ev.Row.Table
		k := t.FullName() + "\x00" + colval.ValueString(ev.Row.ID)
		if c.txKeys[k] {
			continue // again in its transaction: published
		}
		c.txKeys[k] = true
		if byTable[t] == nil {
			order = append(order, t)
		}
		byTable[t] = append(byTable[t], ev.Row)
		inOrder = append(inOrder, asked{ev.Row, c.read})
	}
	for _, t := range order {
		rows := byTable[t]
		ids := make([]any, len(rows))
		for i, row := range rows {
			ids[i] = row.ID
		}
		rctx, cancel := context.WithTimeout(ctx, replayReadTimeout)
		sent, err := c.lookup.Sent(rctx, t, ids)
		cancel()
		c.reads++
		if err != nil {
			if ctx.Err() == nil {
				c.r.log.Warn("could not ask the source replica which replayed rows are SENT already: publishing them all again (consumers see duplicates, nothing is lost)",
					zap.String("table", t.FullName()), zap.Error(err))
			}
			clear(c.skip)
			c.end("the replica could not answer")
			return
		}
		c.checked += len(rows)
		found := 0
		for _, row := range rows {
			fp, ok := sent[colval.ValueString(row.ID)]
			if !ok {
				continue
			}
			if fp != rowstatus.Fingerprint(t, row.Values) {
				continue // another message under this id now (a REPLACE, a table made again or rotated)
			}
			c.skip[row] = true
			found++
		}
		if found > 0 {
			c.skipped += found
			c.r.cfg.Observer.ReplaySkipped(t, int64(found))
		}
	}
	for _, a := range inOrder {
		switch {
		case c.skip[a.row]:
			c.unsent = 0
		case a.read > c.reach:
			c.unsent++
		}
	}
	// Where the check ends. Any row found SENT is left out whatever its
	// place (it was confirmed before it was marked), and ending is never a
	// loss, only rows published again.
	//   - At a rename of a table marked by id alone (above).
	//   - At the first commit made after this Run started: the run before
	//     never read it, nor anything after it.
	//   - Past the rows the run before had handled by its last checkpoint
	//     (its reach), once relay.max_unmarked rows in a row are not SENT:
	//     marks are written in binlog order, mostly, with rows not SENT
	//     among them (a table's few marks kept for a later batch,
	//     committer.coalesce; rows in flight or failed), at most that many
	//     confirmed and unmarked. This bounds the reads after a long outage,
	//     whose backlog the run before never read.
	//   - Without the primary's position (no CatchUp, or it could not be
	//     read): at the first chunk past the reach with no row SENT.
	switch {
	case renamed:
		c.end("a rename of a table marked by id alone")
	case later:
		c.end("a transaction committed after the start")
	case c.after != nil && c.read >= c.reach && c.unsent >= c.runLimit:
		c.end("relay.max_unmarked rows in a row not SENT")
	case c.after == nil && rows && len(c.skip) == 0 && c.read >= c.reach:
		c.end("a chunk with no row SENT")
	}
}

// catchUp waits, once at the start of a Run (before its first read, and
// before any row: the primary is asked its position then, never in steady
// state), for the replica to apply what the primary has logged, the last
// marks of the run before among it, when the lookup can tell.
func (c *replayCheck) catchUp(ctx context.Context) {
	cu, ok := c.lookup.(ReplicaCatchUp)
	if !c.active || !ok {
		return
	}
	start := time.Now()
	after, err := cu.CatchUp(ctx, replayCatchUp)
	c.after = after
	c.waited = time.Since(start).Round(time.Millisecond)
	if err != nil {
		if ctx.Err() == nil {
			c.r.log.Info("the source replica had not applied the primary's latest SENT marks before the replayed rows were checked: rows marked since are published again (duplicates, nothing lost)",
				zap.Duration("waited", c.waited), zap.Error(err))
		}
		return
	}
	c.r.log.Debug("source replica caught up with the primary before the replay check", zap.Duration("waited", c.waited))
}

// skips reports whether row was found SENT in the current chunk.
func (c *replayCheck) skips(row *outbox.Row) bool { return c.skip[row] }

// end stops checking for the rest of the Run and says what it did and why
// it ended, once.
func (c *replayCheck) end(why string) {
	if !c.active {
		return
	}
	c.active = false
	if c.checked == 0 && c.skipped == 0 {
		return
	}
	msg := "replayed rows already SENT were not published again"
	if c.skipped == 0 {
		msg = "replayed rows checked: none was SENT already"
	}
	c.r.log.Info(msg, zap.Int("skipped", c.skipped), zap.Int("checked", c.checked), zap.Int("replica_reads", c.reads),
		zap.Duration("took", time.Since(c.began).Round(time.Millisecond)), zap.Duration("waited_for_replica", c.waited), zap.String("ended_at", why))
}

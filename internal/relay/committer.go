package relay

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// committer is the last stage: it takes the publish results in binlog
// order, applies each transaction's commit once every row before it is
// settled, batches SENT marks and failures, and hands the batches, with the
// position reached, to the recorder, which writes them and saves the
// checkpoint. Batches are written in order, so once one is written every
// commit before its position has all its rows confirmed and marked: that
// position is safe to save. The writes run beside the committer (not inside
// it) so the primary's round trip never stalls the confirms behind it.
type committer struct {
	r    *Relay
	stop context.Context // the graceful stop
	// discard is set once the stream held behind a row it could not record
	// and the stop came: later results only give their budget back.
	discard bool
	// keepNone: the stream holds behind a row (holdUnrecorded), maybe for
	// hours: nothing is kept for a later batch that may never come.
	keepNone bool
	tracker  *binlog.Tracker
	pending  map[*outbox.Table]*rowstatus.Marks
	fails    []*failGroup // failures to record, in the order they came
	count    int          // marks and failures waiting for the next batch
	// cadence decides when a batch is handed over and how many rows may
	// wait unmarked (rowstatus.Cadence); unwritten counts the rows in batches
	// handed to the recorder and not written yet, which the recorder takes
	// back and signals on written.
	cadence   *rowstatus.Cadence
	unwritten *atomic.Int64
	written   <-chan struct{}
	// lag is the delay from the last confirmed row's commit to its confirm.
	lag time.Duration
	// flushTick is the timer that hands over a batch not full yet.
	flushTick *time.Ticker
	advanced  bool // commits applied since the last batch
	// xaOpen: the last commit left a prepared XA branch open in the
	// reader's memory; no position past its prepare is handed on. safe is
	// the position before that prepare, if not handed on yet.
	xaOpen bool
	safe   *binlog.Position
	// seq is the publishing id at the tracker's position, safeSeq at safe's,
	// reachSeq the last confirmed row's (batch.reachSeq).
	seq, safeSeq, reachSeq uint64
	handed                 bool // a position was handed to the recorder (the start one may never have been saved)
	// moving is the rename that the next batch carries (rename.go).
	moving *moved
	// last is the last commit applied (Time zero: none yet).
	last    binlog.Commit
	batches chan<- batch
	// Coalescing (coalesce): since is where each table's pending marks
	// began; applied counts the commits applied, handedAt is that count at
	// the position last handed to the recorder, and kept the rows left
	// pending by the last hand-over. now is the clock (time.Now when nil).
	since    map[*outbox.Table]pendingSince
	applied  uint64
	handedAt uint64
	kept     int
	now      func() time.Time
}

// pendingSince is the committer's state just before a table's first pending
// mark: saving pos (and through) passes none of that table's pending rows.
type pendingSince struct {
	n       uint64 // commits applied
	pos     binlog.Position
	seq     uint64
	through *binlog.Commit
	at      time.Time
	// ok: pos is a position that may be saved (no prepared XA branch open).
	ok bool
}

// coalesceRows: a table with fewer pending marks than this may keep them
// for a later batch (coalesce).
const coalesceRows = 32

// batch is one hand-over from the committer to the recorder.
type batch struct {
	marks map[*outbox.Table]*rowstatus.Marks
	// fails are the failed rows to record, grouped by identical attempt.
	fails []*failGroup
	// pos is the position after the last commit applied before the batch,
	// nil when no commit came since the previous batch; seq is the
	// publishing id there.
	pos *binlog.Position
	seq uint64
	// save asks for a checkpoint save after the marks; final is the drain's
	// last batch.
	save, final bool
	// moved, after the marks and failures, has the recorder mark the rows
	// a rename moved where they live now, and write its recent marks of
	// them again there (rename.go).
	moved *moved
	// through is the last commit applied before the batch: once the batch
	// is written, every row up to it is marked or recorded (nil: none yet).
	through *binlog.Commit
	// rows is the marks and failures in the batch, given back to the
	// committer's count of unmarked rows once written.
	rows int
	// reachSeq is the publishing id of the last row confirmed: its mark is
	// in this batch or an earlier one, or kept for a later one
	// (checkpoint.Checkpoint.Reach).
	reachSeq uint64
}

// Ticket is the relay's tag on a publisher job (publisher.Job[Ticket]): it
// rides through the publisher and comes back with its result, and each kind
// knows how its result is applied, so the committer needs no switch over
// what a job carries. It is sealed: only this package's kinds implement it.
type Ticket interface {
	apply(ctx context.Context, c *committer, res publisher.Result[Ticket]) error
}

// commitTicket is the end of a transaction in the ordered stream; seq is
// the publishing id its last row took (seq.go).
type commitTicket struct {
	commit binlog.Commit
	seq    uint64
}

// rowFailure is a row that could not be routed: it is recorded at its place
// in the order.
type rowFailure struct {
	row    *outbox.Row
	err    error
	weight int64 // taken from the budget
}

// inflightRow is a row's job in the ordered stream.
type inflightRow struct {
	row    *outbox.Row
	weight int64 // taken from the budget
	// unroutable is set when the relay itself addressed the row to the
	// dead-letter exchange because it could not be routed (why, and the
	// table's own route is unknown).
	unroutable error
}

// errNoTicket: a result whose job the relay did not make; only a bug in
// the wiring brings one.
var errNoTicket = errors.New("a publish result without a relay ticket")

// commitResults runs the committer and the recorder until results is
// drained (the final batch is written and saved) or ctx ends.
func (r *Relay) commitResults(ctx, stop context.Context, start binlog.Position, seq uint64, results <-chan publisher.Result[Ticket]) error {
	tracker, err := binlog.NewTracker(start)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	batches := make(chan batch, 2)
	unwritten, written := &atomic.Int64{}, make(chan struct{}, 1)
	rec := &recorder{r: r, latest: start, latestSeq: seq, handed: unwritten, written: written}
	r.unwrittenMarks.Store(unwritten)
	defer func() { r.unwrittenMarks.Store(nil); r.waitingMarks.Store(0) }()
	g.Go(func() error { return rec.run(gctx, batches) })
	c := &committer{r: r, stop: stop, tracker: tracker, seq: seq, pending: map[*outbox.Table]*rowstatus.Marks{}, batches: batches,
		cadence: r.cfg.cadence(), unwritten: unwritten, written: written}
	g.Go(func() error {
		defer close(batches)
		return c.run(gctx, results)
	})
	return g.Wait()
}

func (c *committer) run(ctx context.Context, results <-chan publisher.Result[Ticket]) error {
	c.flushTick = time.NewTicker(c.cadence.Wait())
	defer c.flushTick.Stop()
	saveTick := time.NewTicker(c.r.cfg.CheckpointInterval)
	defer saveTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case res, ok := <-results:
			if !ok {
				// Drained: mark the rest and save where we stand.
				return c.flush(ctx, true, true)
			}
			if err := c.handle(ctx, res); err != nil {
				return err
			}
		case <-c.flushTick.C:
			c.r.warn.flush(c.logSuppressed)
			if err := c.flush(ctx, false, false); err != nil {
				return err
			}
		case <-saveTick.C:
			if err := c.flush(ctx, true, false); err != nil {
				return err
			}
		}
	}
}

func (c *committer) handle(ctx context.Context, res publisher.Result[Ticket]) error {
	if res.Job.Tag == nil {
		return errNoTicket
	}
	return res.Job.Tag.apply(ctx, c, res)
}

func (t commitTicket) apply(_ context.Context, c *committer, _ publisher.Result[Ticket]) error {
	if c.discard {
		return nil
	}
	tx := t.commit
	if tx.OpenXA && !c.xaOpen && (c.advanced || !c.handed) {
		pos := c.tracker.Position()
		c.safe, c.safeSeq = &pos, c.seq
	}
	if err := c.tracker.Apply(tx); err != nil {
		return err
	}
	c.last = tx
	c.applied++
	c.seq = max(c.seq, t.seq)
	c.xaOpen = tx.OpenXA
	c.advanced = !c.xaOpen
	if !c.xaOpen {
		c.safe = nil
	}
	return nil
}

func (t rowFailure) apply(ctx context.Context, c *committer, _ publisher.Result[Ticket]) error {
	defer c.r.budget.release(t.weight)
	if c.discard {
		return nil
	}
	return c.fail(ctx, t.row, "", t.err)
}

func (t *inflightRow) apply(ctx context.Context, c *committer, res publisher.Result[Ticket]) error {
	defer c.r.budget.release(t.weight)
	if c.discard {
		return nil
	}
	return c.row(ctx, t, res)
}

// row settles one published row: SENT (batched), dead-lettered, or failed.
func (c *committer) row(ctx context.Context, tag *inflightRow, res publisher.Result[Ticket]) error {
	row, exchange := tag.row, res.Job.Msg.Exchange
	statusless := row.Table.Columns.Status == ""
	switch {
	case res.Err != nil && statusless:
		return c.holdUnrecorded(ctx, row, exchange, res.Err)
	case res.Err != nil:
		return c.fail(ctx, row, exchange, res.Err)
	case tag.unroutable != nil:
		// The relay addressed it to the dead-letter exchange itself.
		c.deadLettered(row, "", tag.unroutable.Error())
		return nil
	case res.DeadLettered:
		c.deadLettered(row, exchange, res.Reason)
		return nil
	}
	if !statusless && !row.Deleted {
		// Taken only under relay.max_unmarked (admit).
		if err := c.admit(ctx); err != nil {
			return err
		}
	}
	c.r.Stats.Published.Add(1)
	var sinceCommit time.Duration
	if row.EventTime > 0 {
		sinceCommit = time.Since(time.Unix(int64(row.EventTime), 0))
	}
	c.r.cfg.Observer.Published(row.Table, exchange, res.Latency, sinceCommit)
	if statusless || row.Deleted {
		// Nothing to mark: no status column, or the row's own transaction
		// deleted it.
		return nil
	}
	c.lag = sinceCommit
	c.reachSeq = max(c.reachSeq, res.Job.Seq)
	m := c.pending[row.Table]
	if m == nil {
		m = &rowstatus.Marks{}
		c.pending[row.Table] = m
		c.began(row.Table)
	}
	// Copies: go-mysql's strings share the binlog event's buffer, and the
	// recorder keeps recent marks for minutes (rename.go).
	m.Add(ownValue(row.ID), ownValue(row.Values[row.Table.Columns.MessageID]))
	return c.counted(ctx)
}

// flush hands the confirmed rows, and the position reached, to the recorder.
// The channel between them is small: a slow primary holds the pipeline.
// Tables with only a few rows may keep them for a later batch (coalesce):
// the position handed then stops before the first of them.
func (c *committer) flush(ctx context.Context, save, final bool) error {
	// A save request always goes through: the recorder may hold a position
	// that an earlier batch brought and no save has stored yet.
	if c.count == 0 && !c.advanced && c.safe == nil && !save && c.moving == nil {
		return nil
	}
	b := batch{save: save, final: final, moved: c.moving, reachSeq: c.reachSeq}
	if c.last.Time != 0 {
		last := c.last
		b.through = &last
	}
	var hold *pendingSince
	if c.count > 0 {
		keep := c.coalesce(final)
		b.marks, b.rows, c.pending, c.count = c.pending, c.count, map[*outbox.Table]*rowstatus.Marks{}, 0
		b.fails, c.fails = c.fails, nil
		since := map[*outbox.Table]pendingSince{}
		for _, t := range keep {
			m, s := b.marks[t], c.since[t]
			delete(b.marks, t)
			c.pending[t], since[t] = m, s
			c.count += len(m.IDs)
			b.rows -= len(m.IDs)
			if hold == nil || s.n < hold.n {
				hold = &s
			}
		}
		c.since, c.kept = since, c.count
	}
	c.moving = nil // after coalesce: nothing waits beside a rename
	switch {
	case hold != nil:
		// Up to the commit before the oldest kept row, once: the commits
		// after it are handed when its table's marks are (c.advanced stays).
		// The start position too, when nothing was handed yet: it may never
		// have been saved, and a relay with no checkpoint starts where the
		// source is, leaving the rows between to the sweeper.
		b.through = nil
		if hold.n > c.handedAt || !c.handed {
			b.pos, b.seq, b.through, c.handedAt = &hold.pos, hold.seq, hold.through, hold.n
		}
	case c.advanced:
		pos := c.tracker.Position()
		b.pos, b.seq, c.advanced, c.handedAt = &pos, c.seq, false, c.applied
	case c.safe != nil:
		b.pos, b.seq, c.safe = c.safe, c.safeSeq, nil
	}
	if len(b.marks) == 0 && len(b.fails) == 0 && b.pos == nil && b.through == nil && b.moved == nil && !save && !final {
		return nil // every table's marks wait, and the position cannot move
	}
	c.handed = c.handed || b.pos != nil
	if b.rows > 0 {
		// Adapted at each hand-over: the writer is busy when rows of an
		// earlier batch are still not written.
		c.ready()
		c.cadence.Adapt(c.lag, c.unwritten.Load() > 0)
		c.unwritten.Add(int64(b.rows))
		c.r.waitingMarks.Store(int64(c.count)) // after: the gauge never dips between the two
		if c.flushTick != nil {
			c.flushTick.Reset(c.cadence.Wait())
		}
	}
	select {
	case c.batches <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// began notes where t's pending marks begin: the state after the last
// commit applied, which the row being added is not part of (its commit
// comes after its rows).
func (c *committer) began(t *outbox.Table) {
	if c.since == nil {
		c.since = map[*outbox.Table]pendingSince{}
	}
	s := pendingSince{n: c.applied, seq: c.seq, at: c.clock(), ok: c.tracker != nil && !c.xaOpen && c.safe == nil}
	if c.tracker != nil {
		s.pos = c.tracker.Position()
	}
	if c.last.Time != 0 {
		last := c.last
		s.through = &last
	}
	c.since[t] = s
}

// coalesce picks the tables whose marks wait for a later batch. A batch
// that names more tables than relay.mark_sessions (rows of many tenants
// interleaved: one row a transaction over 1,000 schemas) costs one
// statement per table, and a statement costs the servers about the same
// for one row as for dozens. So a table with fewer than coalesceRows
// pending marks keeps them while its first is younger than keepFor, the
// newest tables first, up to half of relay.max_unmarked rows kept; the
// others are marked now. Nothing
// waits in a drain's last batch, beside failures or a rename (their order
// against the marks matters), while a prepared XA branch is open, or once
// the unmarked rows reach relay.max_unmarked. The position handed stops
// before the oldest kept row, so a restart replays it (the replay check
// skips what was marked after it); what a SIGKILL can publish again stays
// under relay.max_unmarked.
func (c *committer) coalesce(final bool) []*outbox.Table {
	c.ready()
	if final || c.keepNone || len(c.fails) > 0 || c.moving != nil || c.xaOpen || c.safe != nil ||
		len(c.pending) <= max(c.r.cfg.MarkSessions, 1) || c.unmarked() >= c.cadence.MaxUnmarked {
		return nil
	}
	now := c.clock()
	var cands []*outbox.Table
	for t, m := range c.pending {
		s, ok := c.since[t]
		if ok && s.ok && len(m.IDs) < coalesceRows && now.Sub(s.at) < c.keepFor() {
			cands = append(cands, t)
		}
	}
	slices.SortFunc(cands, func(a, b *outbox.Table) int { return cmp.Compare(c.since[b].n, c.since[a].n) })
	budget, kept := c.cadence.MaxUnmarked/2, 0
	var keep []*outbox.Table
	for _, t := range cands {
		n := len(c.pending[t].IDs)
		if kept+n > budget {
			break
		}
		kept += n
		keep = append(keep, t)
	}
	return keep
}

// keepFor is the longest a table's marks are kept for a later batch: five
// times the cadence's longest wait (25 x relay.flush_interval, 5 s by
// default). At 1,500 rows/s over 1,000 tables a second holds about one row
// a table; what bounds the rows kept is half of relay.max_unmarked.
func (c *committer) keepFor() time.Duration { return 5 * c.cadence.MaxInterval }

func (c *committer) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// counted notes one more row waiting for the next batch and hands the batch
// over when it is full (rowstatus.Cadence).
func (c *committer) counted(ctx context.Context) error {
	c.count++
	c.r.waitingMarks.Store(int64(c.count))
	// Rows kept back by coalescing wait for a batch of fresh ones.
	if c.cadence.Full(c.count-c.kept, c.unmarked()) {
		return c.flush(ctx, false, false)
	}
	return nil
}

// unmarked is the rows confirmed and not written yet: waiting here, and in
// batches the recorder has not written.
func (c *committer) unmarked() int {
	c.ready()
	return c.count + int(c.unwritten.Load())
}

// ready fills what a committer built in a test left out: the cadence from
// the relay's Config, and a count of unwritten rows of its own.
func (c *committer) ready() {
	if c.cadence == nil {
		c.cadence = c.r.cfg.cadence()
	}
	if c.unwritten == nil {
		c.unwritten = &atomic.Int64{}
	}
}

// admit waits, before one more row is taken, until the unmarked rows are
// under relay.max_unmarked: it hands over what waits here and waits for the
// recorder to write. The confirms queue meanwhile (and, behind them, the
// publisher), so a crash never finds more than max_unmarked rows confirmed
// and unmarked to publish again.
func (c *committer) admit(ctx context.Context) error {
	for !c.cadence.Admit(c.unmarked()) {
		if c.count > 0 {
			if err := c.flush(ctx, false, false); err != nil {
				return err
			}
			continue
		}
		select {
		case <-c.written:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ownValue returns v with a string copied, so that keeping it does not keep
// the buffer it was decoded from.
func ownValue(v any) any {
	if s, ok := v.(string); ok {
		return strings.Clone(s)
	}
	return v
}

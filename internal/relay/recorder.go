package relay

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// recorder writes the committer's batches in order: the SENT updates (one
// statement per table, retried until the primary takes it: the checkpoint
// must not pass unmarked rows), the failures, then the checkpoint when one
// is due.
type recorder struct {
	r *Relay
	// latest is the position after the last written batch; dirty means it
	// was not saved yet.
	latest binlog.Position
	dirty  bool
	// latestSeq is the publishing id at latest (seq.go); reachSeq the
	// highest of a written batch (batch.reachSeq).
	latestSeq, reachSeq uint64
	// storeDown is when saving the checkpoint started failing (zero while
	// it works): publishing goes on for StoreOutageWindow after it.
	storeDown time.Time
	// recent are the recent marks by table, for a rename that comes after
	// them (rename.go), and gens those of the rows renames moved away
	// (generations.go).
	recent   recentMarks
	recentMu sync.Mutex // markAll's goroutines note marks side by side
	gens     map[*outbox.Table]map[uint64]*generation
	// handed counts the rows of batches handed over and not written yet
	// (the committer's ceiling, relay.max_unmarked); written tells the
	// committer some were.
	handed  *atomic.Int64
	written chan<- struct{}
}

func (w *recorder) run(ctx context.Context, batches <-chan batch) error {
	for b := range batches {
		if err := w.write(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// write writes one batch: its marks, failures and rename, then the
// position.
func (w *recorder) write(ctx context.Context, b batch) error {
	if err := w.markAll(ctx, b.marks); err != nil {
		return err
	}
	w.reachSeq = max(w.reachSeq, b.reachSeq)
	for _, g := range b.fails {
		if err := w.recordFailures(ctx, g); err != nil {
			return err
		}
	}
	if b.moved != nil {
		if err := w.follow(ctx, b.moved); err != nil {
			return err
		}
	}
	if b.rows > 0 && w.handed != nil {
		w.handed.Add(-int64(b.rows))
		select {
		case w.written <- struct{}{}:
		default: // a signal is waiting already
		}
	}
	if b.through != nil {
		w.r.marked.Store(b.through)
	}
	if b.pos != nil {
		w.latest, w.latestSeq, w.dirty = *b.pos, b.seq, true
	}
	// A batch that moves the position is saved at once, after its marks,
	// not only on the timer: a restart then replays only what came after
	// the last marks. Batches are handed over at most every
	// relay.flush_interval or relay.batch_size rows, so this is one Redis
	// write per batch, beside the primary's round trip the marks took.
	if b.save || b.final || b.pos != nil {
		return w.save(ctx, b.final)
	}
	return nil
}

// markAll writes a batch's marks, one statement per table. The tables of a
// batch are marked side by side on up to relay.mark_sessions connections:
// each statement commits on its own (autocommit, as one table's mark
// would), so none holds a lock while another runs, and the application's
// transactions over several outbox tables wait for no more than one
// table's mark, as before. A batch names many tables when rows of many
// tenants interleave (one row a transaction over 1,000 schemas: 1,000
// statements), and each autocommit's round trip and commit then adds up.
// Every statement lands, or the error stops the pipeline, before the
// batch's position is saved.
func (w *recorder) markAll(ctx context.Context, marks map[*outbox.Table]*rowstatus.Marks) error {
	par := min(max(w.r.cfg.MarkSessions, 1), len(marks))
	if par <= 1 {
		for t, m := range marks {
			if err := w.markSent(ctx, t, *m); err != nil {
				return err
			}
		}
		return nil
	}
	type job struct {
		t *outbox.Table
		m *rowstatus.Marks
	}
	jobs := make(chan job)
	errs := make(chan error, par)
	for range par {
		go func() {
			var first error
			for j := range jobs {
				if first == nil {
					first = w.markSent(ctx, j.t, *j.m)
				}
			}
			errs <- first
		}()
	}
	for t, m := range marks {
		jobs <- job{t, m}
	}
	close(jobs)
	var err error
	for range par {
		err = cmp.Or(err, <-errs)
	}
	return err
}

// markSent moves one table's confirmed rows to SENT, retried until the
// primary takes it. It may run beside other tables' (markAll).
func (w *recorder) markSent(ctx context.Context, t *outbox.Table, m rowstatus.Marks) error {
	ids := m.IDs
	return retry(ctx, w.r.log, "marking rows sent", func() error {
		n, err := w.r.marker.MarkSent(ctx, t, m)
		if rowstatus.TableMissing(err) {
			// Renamed away with nothing in its place yet ("ALTER TABLE t
			// RENAME TO t_old" not yet read), or dropped: no row here to
			// mark. Kept with the recent marks, which a rename later in
			// the stream writes again where the rows went (rename.go).
			w.r.log.Warn("marks not written: the outbox table does not exist; if it was renamed, they are written where its rows went when the stream reaches the rename",
				zap.String("table", t.FullName()), zap.Int("rows", len(ids)))
			w.noteRecent(t, m)
			return nil
		}
		if err != nil {
			return err
		}
		w.r.Stats.Marked.Add(n)
		w.r.cfg.Observer.Marked(t, n)
		w.noteRecent(t, m)
		if dup := int64(len(ids)) - n; dup > 0 {
			// Only publishable rows move: the others were SENT already,
			// so this publish was a duplicate.
			w.r.Stats.AlreadySent.Add(dup)
			w.r.cfg.Observer.AlreadySent(t, dup)
		}
		return nil
	})
}

// noteRecent keeps t's marks for a rename later in the stream; markSent
// calls it from the tables' goroutines.
func (w *recorder) noteRecent(t *outbox.Table, m rowstatus.Marks) {
	w.recentMu.Lock()
	defer w.recentMu.Unlock()
	w.recent.note(t, m)
}

// save stores the position. While the store is unreachable the pipeline
// keeps publishing for StoreOutageWindow with the position held here (a
// crash then replays from the last save, so the window bounds the replay),
// then holds until the store answers. The final save of a drain holds at
// once. A fenced write (the lease is lost) stops the pipeline.
func (w *recorder) save(ctx context.Context, final bool) error {
	// The final save of a stop writes the position even when nothing moved
	// since the last save: the store may have lost it meanwhile (a Redis
	// restart without persistence, a deleted key), and the next start must
	// not take a gap for a position this relay knows.
	if !w.dirty && !(final && w.latest != (binlog.Position{})) {
		return nil
	}
	cp := w.r.checkpointAt(w.latest)
	if w.r.cfg.SeqScope != "" {
		cp.Seq, cp.SeqScope = w.latestSeq, w.r.cfg.SeqScope
	}
	if w.reachSeq > w.latestSeq {
		cp.Reach = w.reachSeq - w.latestSeq
	}
	err := w.r.store.Save(ctx, cp)
	if err != nil && !errors.Is(err, checkpoint.ErrFenced) && ctx.Err() == nil {
		if w.storeDown.IsZero() {
			w.storeDown = time.Now()
			w.r.log.Warn("saving the checkpoint failed; publishing on with the position held in memory",
				zap.Duration("outage_window", w.r.cfg.StoreOutageWindow), zap.String("gtid", cp.GTIDSet), zap.Error(err))
		}
		if !final && time.Since(w.storeDown) < w.r.cfg.StoreOutageWindow {
			return nil
		}
		w.r.log.Error("the checkpoint could not be saved for longer than the outage window: publishing holds until it can",
			zap.Duration("outage_window", w.r.cfg.StoreOutageWindow), zap.Duration("down_for", time.Since(w.storeDown).Round(time.Second)))
		err = retry(ctx, w.r.log, "saving the checkpoint", func() error {
			cp.SavedAt = time.Now().UTC() // the save that lands says when it landed
			return w.r.store.Save(ctx, cp)
		})
	}
	if err != nil {
		return err
	}
	if !w.storeDown.IsZero() {
		w.r.log.Info("checkpoint saved again after an outage", zap.Duration("down_for", time.Since(w.storeDown).Round(time.Second)),
			zap.String("gtid", cp.GTIDSet))
		w.storeDown = time.Time{}
	}
	w.dirty = false
	w.r.lastSaved.Store(&cp)
	w.r.Stats.Checkpoints.Add(1)
	w.r.cfg.Observer.Checkpointed(cp)
	w.r.log.Debug("checkpoint saved", zap.String("gtid", cp.GTIDSet), zap.String("binlog_file", cp.File), zap.Uint32("binlog_pos", cp.Pos))
	return nil
}

// checkpointAt is the checkpoint of pos, naming the server it was read on.
func (r *Relay) checkpointAt(pos binlog.Position) checkpoint.Checkpoint {
	server := ""
	if r.cfg.Server != nil {
		server = r.cfg.Server()
	}
	return checkpoint.FromPosition(pos, server, time.Now())
}

// retry runs op until it succeeds or ctx ends, with capped backoff. A
// primary or Redis outage holds the pipeline (and so the checkpoint) rather
// than losing track of rows.
func retry(ctx context.Context, log *zap.Logger, what string, op func() error) error {
	wait := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := op()
		if err == nil {
			return nil
		}
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, checkpoint.ErrFenced) {
			return err // the lease is lost: retrying cannot help
		}
		pause := wait.Next()
		log.Warn(what+" failed, retrying", zap.Error(err), zap.Duration("backoff", pause))
		if err := backoff.Sleep(ctx, pause); err != nil {
			return err
		}
	}
}

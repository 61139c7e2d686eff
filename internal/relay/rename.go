package relay

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// A rename of an outbox table moves the rows read before it:
//
//   - archival, "RENAME TABLE t TO t_2026_11, t_new TO t": the new t was
//     created empty by CREATE TABLE ... LIKE, its ids start at 1 again;
//   - an online schema change's cut-over, gh-ost's "RENAME TABLE t TO
//     _t_del, _t_gho TO t" or pt-online-schema-change's "RENAME TABLE t TO
//     _t_old, _t_new TO t": the new t is a copy holding the same rows (same
//     ids, same message ids), and the old table is dropped sooner or later
//     (pt-online-schema-change drops it at once by default);
//   - "ALTER TABLE t RENAME TO t_old", a new t created later or never.
//
// The relay marks those rows where they now live and, when the same
// statement renamed another table in under the configured name (the first
// two: binlog.Rename.Replaced), under that name as well: in a cut-over the
// copy is the row that lives on. Archival and cut-over look the same in the
// binlog, so a write under the configured name always matches the message
// id as well as the id (rowstatus.Marks): in archival it finds no row of the
// new table, in a cut-over it finds the copy. A table without a message-id
// column of its own cannot be matched: its rows are marked where they now
// live only, and a warning says that a cut-over's copies stay pending for
// the sweeper.
//
// The binlog shows the rename only after the primary ran it, so two kinds of
// marks are affected:
//
//   - marks and failures not yet written when the rename reaches the
//     committer (it comes in binlog order, after every row before it): they
//     are written as above, in the batch that carries the position past
//     those rows;
//   - marks written before the relay read the rename went by name: to the
//     old table before the primary ran it (a tool that copies statuses up to
//     its cut-over may have missed the last of them), to the new one after
//     it (after a restart from a checkpoint before the rename: the marks of
//     every row replayed up to it), where they found the copy or nothing
//     (guarded; unguarded, rows of the new table that the binlog path
//     publishes anyway). The recorder keeps the recent marks and writes them
//     again in both places. A mark moves only rows still publishable, so
//     writing one twice changes nothing for a row already SENT.
//
// A table's rows may move more than once: the rows read under the
// configured name up to a rename that takes their table away are a
// generation (binlog.Rename.Generation), and the recorder keeps each
// generation's recent marks with where it lives now, so that a later
// rename of it writes them again: a two-step cut-over ("RENAME TABLE t TO
// _t_del", then "RENAME TABLE _t_gho TO t", gh-ost's --cut-over=two-step,
// Facebook's OSC) marks the copy now under the configured name by message
// id at its second statement; a table renamed away and back ("t TO t_tmp",
// then "t_tmp TO t") has its marks written under the configured name
// again, not to a t_tmp that no longer exists (and its rows then go on as
// the current generation's); an archive renamed on is marked where it went.
//
// Retries and FAILED records go the same ways. In a cut-over the copy under
// the configured name gets them, and the sweeper retries it there. In
// archival they land in the archive only, which the sweeper does not read
// (it reads the configured tables): those rows are not retried, and the
// recorder warns once per rename with what to do. A table that does not
// exist when the relay writes to it has no row to mark: the write is
// skipped, not retried.

// renameTicket carries a rename through the ordered stream.
type renameTicket struct{ rename *binlog.Rename }

// moved is a generation of a table's rows' new location, and what goes
// there.
type moved struct {
	from, to *outbox.Table // the configured table; the rows' new location
	// named: another table holds the configured name, and gets the writes
	// too, matched by message id.
	named bool
	// gen is the generation concerned; earlier: an earlier one (not the
	// rows read since the last rename), back: it came back under the
	// configured name.
	gen           uint64
	earlier, back bool
	// marks are those of the rows read before the rename that were not
	// written when it reached the committer (nil: none, and always for an
	// earlier generation); fails the failures recorded with the rename.
	marks *rowstatus.Marks
	fails []*failGroup
	// The recorder's once-per-rename log lines: a table a write found
	// missing, retries left where the configured name is not.
	missing  map[*outbox.Table]bool
	stranded bool
}

// movedTable is t under another name: the statements the relay runs over it
// name that table.
func movedTable(t *outbox.Table, schema, name string) *outbox.Table {
	m := *t
	m.Schema, m.Name = schema, name
	return &m
}

// apply hands the rows' marks and failures not written yet to the
// recorder with their new location, in the batch that ends before the
// rename. A move of an earlier generation has none: the recorder writes
// that generation's kept marks again.
func (t renameTicket) apply(ctx context.Context, c *committer, _ publisher.Result[Ticket]) error {
	if c.discard {
		return nil
	}
	rn := t.rename
	from := rn.Table
	mv := &moved{from: from, to: movedTable(from, rn.Schema, rn.Name), named: rn.Replaced,
		gen: rn.Generation, earlier: rn.Earlier, back: rn.Back()}
	if !rn.Earlier {
		mv.marks = c.pending[from]
		delete(c.pending, from)
		for _, g := range c.fails {
			if g.t == from {
				g.t, g.moved = mv.to, mv
			}
		}
	}
	c.moving = mv
	return c.flush(ctx, false, false)
}

// renameCounts are the rows a rename's writes moved where the rows live
// and under the configured name.
type renameCounts struct{ at, named int64 }

func (c *renameCounts) add(o renameCounts) { c.at, c.named = c.at+o.at, c.named+o.named }

// follow writes what a rename moved: the marks not written yet, then the
// generation's recent marks again, where its rows live now. The
// generation's marks are kept for a later move of it (generations.go).
func (w *recorder) follow(ctx context.Context, mv *moved) error {
	if mv.named && mv.from.Columns.Status != "" && !rowstatus.OwnMessageID(mv.from) {
		w.r.log.Warn("outbox table renamed and another table renamed in under its name: without a message-id column of its own the rows read before "+
			"cannot be matched there, so they are marked where they now live only; if this was an online schema change's cut-over, "+
			"their copies under the configured name stay pending and the sweeper sends them again after its grace period",
			zap.String("table", mv.from.FullName()), zap.String("renamed_to", mv.to.FullName()))
	}
	gen := w.generation(mv)
	if gen == nil {
		w.r.log.Info("outbox table renamed: the rows it moved were read before the relay started here, or long ago; nothing kept to mark again",
			zap.String("table", mv.from.FullName()), zap.String("renamed_to", mv.to.FullName()), zap.Uint64("generation", mv.gen))
		return nil
	}
	var first renameCounts
	if mv.marks != nil {
		var err error
		if first, err = w.markMoved(ctx, mv, *mv.marks); err != nil {
			return err
		}
		if dup := int64(len(mv.marks.IDs)) - max(first.at, first.named); dup > 0 {
			// Pending in neither place: published again.
			w.r.Stats.AlreadySent.Add(dup)
			w.r.cfg.Observer.AlreadySent(mv.from, dup)
		}
	}
	again, asked, err := w.remark(ctx, mv, gen.marks)
	if err != nil {
		return err
	}
	if mv.marks != nil {
		gen.marks.add(*mv.marks, time.Now())
	}
	for _, g := range mv.fails {
		gen.marks.addFailure(g, time.Now())
	}
	if mv.named {
		// Copies of these rows may live under the configured name now (a
		// cut-over's copy), and go wherever the table there goes: their
		// marks go on with the current generation's, matched by message id.
		w.recent.list(mv.from).mergeGuarded(gen.marks, mv.from)
	}
	w.r.log.Info("outbox table renamed: the rows read before it are marked where they now live",
		zap.String("table", mv.from.FullName()), zap.String("renamed_to", mv.to.FullName()), zap.Bool("replaced", mv.named),
		zap.Uint64("generation", mv.gen), zap.Bool("earlier", mv.earlier), zap.Bool("back", mv.back),
		zap.Int64("marked", first.at), zap.Int64("marked_under_configured_name", first.named),
		zap.Int64("remarked", again.at), zap.Int64("remarked_under_configured_name", again.named), zap.Int64("of_recent_marks", asked))
	return nil
}

// markMoved marks rows a rename moved where they live and, when another
// table took the configured name, there too where the marks can be
// matched by message id.
func (w *recorder) markMoved(ctx context.Context, mv *moved, m rowstatus.Marks) (c renameCounts, err error) {
	if c.at, err = w.markAt(ctx, mv, mv.to, m); err != nil {
		return c, err
	}
	if mv.named && m.Guarded(mv.from) {
		c.named, err = w.markAt(ctx, mv, mv.from, m)
	}
	return c, err
}

// markAt writes marks of moved rows to t, retried until the primary takes
// them; a table that does not exist has none of the rows.
func (w *recorder) markAt(ctx context.Context, mv *moved, t *outbox.Table, m rowstatus.Marks) (int64, error) {
	var n int64
	err := retry(ctx, w.r.log, "marking renamed rows sent", func() error {
		var err error
		n, err = w.r.marker.MarkSent(ctx, t, m)
		if rowstatus.TableMissing(err) {
			w.noteMissing(mv, t)
			n, err = 0, nil
		}
		return err
	})
	if n > 0 {
		w.r.Stats.Marked.Add(n)
		w.r.cfg.Observer.Marked(t, n)
	}
	return n, err
}

// noteMissing logs, once per rename and table, that a table its writes go
// to does not exist.
func (w *recorder) noteMissing(mv *moved, t *outbox.Table) {
	if mv.missing[t] {
		return
	}
	if mv.missing == nil {
		mv.missing = map[*outbox.Table]bool{}
	}
	mv.missing[t] = true
	w.r.log.Info("outbox table renamed: a table the rows read before it would be marked in does not exist (dropped after the rename, as "+
		"pt-online-schema-change does by default, or not created yet); nothing to mark there",
		zap.String("table", mv.from.FullName()), zap.String("missing", t.FullName()))
}

// recordMoved records failures of rows a rename moved, where they live and,
// matched by message id, under the configured name when another table took
// it. Rows recorded only where they live now are not swept: that is
// warned once per rename.
func (w *recorder) recordMoved(ctx context.Context, g *failGroup) (rowstatus.Outcome, int64, error) {
	mv := g.moved
	outcome, at, err := w.recordAt(ctx, g.t, g)
	if err != nil {
		return outcome, at, err
	}
	var named int64
	if mv.named && g.rows.Guarded(mv.from) {
		var o rowstatus.Outcome
		if o, named, err = w.recordAt(ctx, mv.from, g); err != nil {
			return o, named, err
		}
		if named > 0 {
			outcome = o
		}
	}
	if at > named && !mv.stranded {
		mv.stranded = true
		w.r.log.Warn("failed publishes of rows read before an outbox table was renamed are recorded where the rows now live: the sweeper reads the "+
			"configured tables only, so these rows are not retried, nor requeued when FAILED; list the table under tables: (the sweeper then sends "+
			"them when due), or copy them into the configured table, which publishes them as new rows",
			zap.String("table", mv.from.FullName()), zap.String("renamed_to", mv.to.FullName()), zap.Int64("rows", at-named),
			zap.String("message_id", g.first))
	}
	return outcome, max(at, named), nil
}

// recentMarks keeps, per table, the ids of the recent marks of the rows
// read since its last rename away (its current generation).
type recentMarks map[*outbox.Table]*recentList

// recentList keeps the ids of a generation's recent marks, up to
// recentKeep ids and recentFor old; dropped counts the ids let go early
// (past recentKeep) within recentFor, which a rename can then not repeat.
type recentList struct {
	marks   []recentMark
	ids     int
	dropped int
	since   time.Time // of the oldest drop counted
}

// recentMark is one batch of marks or, with fail set, one failure
// recorded (marks are its rows).
type recentMark struct {
	at    time.Time
	marks rowstatus.Marks
	fail  *failGroup
}

const (
	recentKeep = 100_000
	recentFor  = 10 * time.Minute
)

func (m *recentMarks) note(t *outbox.Table, marks rowstatus.Marks) {
	m.list(t).add(marks, time.Now())
}

// list is t's list, made empty if it has none.
func (m *recentMarks) list(t *outbox.Table) *recentList {
	if *m == nil {
		*m = recentMarks{}
	}
	l := (*m)[t]
	if l == nil {
		l = &recentList{}
		(*m)[t] = l
	}
	return l
}

func (l *recentList) add(marks rowstatus.Marks, now time.Time) {
	l.marks = append(l.marks, recentMark{at: now, marks: marks})
	l.ids += len(marks.IDs)
	l.trim(now)
}

// addFailure keeps a failure recorded, to be written again where a rename
// moves its rows.
func (l *recentList) addFailure(g *failGroup, now time.Time) {
	l.marks = append(l.marks, recentMark{at: now, marks: g.rows, fail: g})
	l.ids += len(g.rows.IDs)
	l.trim(now)
}

// trim lets marks go past recentKeep ids or recentFor.
func (l *recentList) trim(now time.Time) {
	if l.dropped > 0 && now.Sub(l.since) > recentFor {
		l.dropped = 0
	}
	for len(l.marks) > 0 && (l.ids > recentKeep || now.Sub(l.marks[0].at) > recentFor) {
		old := l.marks[0]
		if now.Sub(old.at) <= recentFor {
			if l.dropped == 0 {
				l.since = old.at
			}
			l.dropped += len(old.marks.IDs)
		}
		l.ids -= len(old.marks.IDs)
		l.marks[0] = recentMark{}
		l.marks = l.marks[1:]
	}
}

// merge appends o's marks (a generation back under the configured name
// joins the current one).
func (l *recentList) merge(o *recentList) {
	l.marks = append(l.marks, o.marks...)
	l.ids += o.ids
	l.dropped += o.dropped
	l.trim(time.Now())
}

// mergeGuarded appends those of o's marks that are matched by message id
// in t.
func (l *recentList) mergeGuarded(o *recentList, t *outbox.Table) {
	for _, e := range o.marks {
		if e.marks.Guarded(t) {
			l.marks = append(l.marks, e)
			l.ids += len(e.marks.IDs)
		}
	}
	l.trim(time.Now())
}

// remark writes a generation's recent marks again where its rows now live
// (and under the configured name when another table holds it); asked is
// how many ids it wrote.
func (w *recorder) remark(ctx context.Context, mv *moved, l *recentList) (c renameCounts, asked int64, err error) {
	l.trim(time.Now())
	if l.dropped > 0 {
		w.r.log.Warn("outbox table renamed: the marks of some rows read before it went to the new table by name and are too many to repeat; those rows were published but may stay pending where they now live",
			zap.String("table", mv.from.FullName()), zap.String("renamed_to", mv.to.FullName()), zap.Int("rows", l.dropped))
	}
	for _, e := range l.marks {
		if e.fail != nil {
			if err := w.recordAgain(ctx, mv, e.fail); err != nil {
				return c, asked, err
			}
			continue
		}
		n, err := w.markMoved(ctx, mv, e.marks)
		if err != nil {
			return c, asked, err
		}
		c.add(n)
		asked += int64(len(e.marks.IDs))
	}
	return c, asked, nil
}

// recordAgain writes a failure recorded before again where a rename moved
// its rows (and under the configured name, matched by message id, when
// another table holds it), for the rows the first write did not reach:
// those still at the attempt's retry count (rowstatus.Attempt.Repeat).
func (w *recorder) recordAgain(ctx context.Context, mv *moved, g *failGroup) error {
	again := *g
	again.t, again.moved = mv.to, mv
	again.attempt.Repeat = true
	_, n, err := w.recordMoved(ctx, &again)
	if err == nil && n > 0 {
		w.r.log.Warn("failed publishes recorded again where a rename moved their rows: the first record went to the table under the old name",
			zap.String("table", mv.from.FullName()), zap.String("renamed_to", mv.to.FullName()), zap.Int64("rows", n),
			zap.String("message_id", g.first), zap.String("reason", g.attempt.Reason))
	}
	return err
}

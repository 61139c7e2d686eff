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

// A rename of an outbox table (archival by "RENAME TABLE t TO t_2026_11,
// t_new TO t") moves the rows read before it, and the relay must mark them
// where they now live, not by the configured name, which from the rename
// on names the new table. The binlog shows the rename only after the
// primary ran it, so two kinds of marks are affected:
//
//   - marks and failures not yet written when the rename reaches the
//     committer (it comes in binlog order, after every row before it): they
//     are written to the new location;
//   - marks written between the rename on the primary and the relay reading
//     it (after a restart from a checkpoint before the rename: the marks of
//     every row replayed up to it) went to the new table by name. There
//     they moved nothing, or, where the new table's ids run over the same
//     numbers (CREATE TABLE ... LIKE starts at 1), rows of the new table
//     that the binlog path publishes anyway. The recorder keeps the recent
//     marks and writes them again to the new location. A mark moves only
//     rows still publishable, so writing one twice changes nothing for a
//     row already SENT.
//
// A gh-ost or pt-online-schema-change cut-over swaps in a copy that holds
// the same rows: there the first marks were right, and the second ones find
// the old table's rows (those of the copy were marked) which is harmless.

// renameTicket carries a rename through the ordered stream.
type renameTicket struct{ rename *binlog.Rename }

// moved is a table's rows' new location.
type moved struct {
	from, to *outbox.Table
}

// movedTable is t under another name: the statements the relay runs over it
// name that table.
func movedTable(t *outbox.Table, schema, name string) *outbox.Table {
	m := *t
	m.Schema, m.Name = schema, name
	return &m
}

func (t renameTicket) apply(ctx context.Context, c *committer, _ publisher.Result[Ticket]) error {
	if c.discard {
		return nil
	}
	from := t.rename.Table
	to := movedTable(from, t.rename.Schema, t.rename.Name)
	if m := c.pending[from]; m != nil {
		if dst := c.pending[to]; dst != nil {
			dst.IDs, dst.MessageIDs = append(dst.IDs, m.IDs...), append(dst.MessageIDs, m.MessageIDs...)
		} else {
			c.pending[to] = m
		}
		delete(c.pending, from)
	}
	for _, g := range c.fails {
		if g.t == from {
			g.t = to
		}
	}
	if err := c.flush(ctx, false, false); err != nil {
		return err
	}
	select {
	case c.batches <- batch{moved: &moved{from: from, to: to}}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recentMarks keeps, per table, the ids of the recent marks, up to
// recentKeep ids and recentFor old; dropped counts the ids let go early
// (past recentKeep) within recentFor, which a rename can then not repeat.
type recentMarks map[*outbox.Table]*recentList

type recentList struct {
	marks   []recentMark
	ids     int
	dropped int
	since   time.Time // of the oldest drop counted
}

type recentMark struct {
	at    time.Time
	marks rowstatus.Marks
}

const (
	recentKeep = 100_000
	recentFor  = 10 * time.Minute
)

func (m *recentMarks) note(t *outbox.Table, marks rowstatus.Marks) {
	if *m == nil {
		*m = recentMarks{}
	}
	l := (*m)[t]
	if l == nil {
		l = &recentList{}
		(*m)[t] = l
	}
	now := time.Now()
	l.marks = append(l.marks, recentMark{at: now, marks: marks})
	l.ids += len(marks.IDs)
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

// remark writes the table's recent marks again where its rows now
// live.
func (w *recorder) remark(ctx context.Context, mv *moved) error {
	l := w.recent[mv.from]
	delete(w.recent, mv.from)
	if l == nil {
		l = &recentList{}
	}
	if l.dropped > 0 {
		w.r.log.Warn("outbox table renamed: the marks of some rows read before it went to the new table by name and are too many to repeat; those rows were published but may stay pending where they now live",
			zap.String("table", mv.from.FullName()), zap.String("renamed_to", mv.to.FullName()), zap.Int("rows", l.dropped))
	}
	var asked, marked int64
	for _, e := range l.marks {
		err := retry(ctx, w.r.log, "marking renamed rows sent", func() error {
			n, err := w.r.marker.MarkSent(ctx, mv.to, e.marks)
			if err == nil {
				marked += n
			}
			return err
		})
		if err != nil {
			return err
		}
		asked += int64(len(e.marks.IDs))
	}
	if marked > 0 {
		w.r.Stats.Marked.Add(marked)
		w.r.cfg.Observer.Marked(mv.to, marked)
	}
	w.r.log.Info("outbox table renamed: the rows read before it are marked where they now live",
		zap.String("table", mv.from.FullName()), zap.String("renamed_to", mv.to.FullName()),
		zap.Int64("remarked", marked), zap.Int64("of_recent_marks", asked))
	return nil
}

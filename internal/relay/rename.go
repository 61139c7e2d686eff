package relay

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
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
//     it went to the new table by name and moved fewer rows than they named
//     (the rows were not there): the recorder keeps the recent such marks
//     and writes them again to the new location. A mark moves only rows
//     still publishable, so writing it twice changes nothing for rows that
//     were duplicates.
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
	if ids := c.pending[from]; len(ids) > 0 {
		c.pending[to] = append(c.pending[to], ids...)
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

// missedMarks keeps, per table, the ids of recent marks that moved fewer
// rows than they named, up to missedKeep ids and missedFor old.
type missedMarks map[*outbox.Table][]missedMark

type missedMark struct {
	at  time.Time
	ids []any
}

const (
	missedKeep = 100_000
	missedFor  = 10 * time.Minute
)

func (m *missedMarks) note(t *outbox.Table, ids []any) {
	if *m == nil {
		*m = missedMarks{}
	}
	now := time.Now()
	list := append((*m)[t], missedMark{at: now, ids: ids})
	n := 0
	for _, e := range list {
		n += len(e.ids)
	}
	for len(list) > 0 && (n > missedKeep || now.Sub(list[0].at) > missedFor) {
		n -= len(list[0].ids)
		list = list[1:]
	}
	(*m)[t] = list
}

// remark writes the table's recent short marks again where its rows now
// live.
func (w *recorder) remark(ctx context.Context, mv *moved) error {
	list := w.missed[mv.from]
	delete(w.missed, mv.from)
	var asked, marked int64
	for _, e := range list {
		err := retry(ctx, w.r.log, "marking renamed rows sent", func() error {
			n, err := w.r.marker.MarkSent(ctx, mv.to, e.ids)
			if err == nil {
				marked += n
			}
			return err
		})
		if err != nil {
			return err
		}
		asked += int64(len(e.ids))
	}
	if marked > 0 {
		w.r.Stats.Marked.Add(marked)
		w.r.cfg.Observer.Marked(mv.to, marked)
	}
	w.r.log.Info("outbox table renamed: the rows read before it are marked where they now live",
		zap.String("table", mv.from.FullName()), zap.String("renamed_to", mv.to.FullName()),
		zap.Int64("remarked", marked), zap.Int64("of_short_marks", asked))
	return nil
}

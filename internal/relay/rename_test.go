package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// tablesMarker is a primary's outbox tables, by full name: id -> row. A
// write matches the message id where the marks are Guarded, as the real
// statements do; a table it does not hold does not exist (ER_NO_SUCH_TABLE).
type tablesMarker map[string]map[any]*fakeRow

type fakeRow struct{ msgID, status string }

func (m tablesMarker) set(t *outbox.Table, m2 rowstatus.Marks, status string) (int64, error) {
	rows, ok := m[t.FullName()]
	if !ok {
		return 0, &mysql.MySQLError{Number: 1146, Message: fmt.Sprintf("Table '%s' doesn't exist", t.FullName())}
	}
	var n int64
	for i, id := range m2.IDs {
		r := rows[id]
		if r == nil || r.status != "PENDING" || (m2.Guarded(t) && r.msgID != m2.MessageIDs[i]) {
			continue
		}
		r.status = status
		n++
	}
	return n, nil
}

func (m tablesMarker) MarkSent(_ context.Context, t *outbox.Table, marks rowstatus.Marks) (int64, error) {
	return m.set(t, marks, "SENT")
}

func (m tablesMarker) MarkRetryMany(_ context.Context, t *outbox.Table, _ rowstatus.Attempt, rows rowstatus.Marks) (rowstatus.Outcome, int64, error) {
	n, err := m.set(t, rows, "RETRY")
	return rowstatus.Retrying, n, err
}

// statuses lists a table's rows as id:status, in id order.
func (m tablesMarker) statuses(name string) string {
	rows, ok := m[name]
	if !ok {
		return "(missing)"
	}
	var out []string
	for id := 1; id <= len(rows); id++ {
		out = append(out, fmt.Sprintf("%d:%s", id, rows[id].status))
	}
	return strings.Join(out, " ")
}

// pendingRows is a table of rows 1..n, PENDING, message ids prefix-<id>.
func pendingRows(n int, prefix string) map[any]*fakeRow {
	rows := map[any]*fakeRow{}
	for id := 1; id <= n; id++ {
		rows[id] = &fakeRow{msgID: fmt.Sprint(prefix, id), status: "PENDING"}
	}
	return rows
}

// What a rename does with the rows read before it: rows 1-3 published and
// not marked yet, row 4 failed, when the rename reaches the committer.
// Marks and the failure go where the rows live and, when another table
// took the configured name, there too, matched by message id: the copy a
// cut-over swapped in is marked, the new rows of an archival rotation
// (the same ids, other messages) are not. A retry left where the sweeper
// does not read is warned about, once.
func TestRenameMarksWhereTheRowsLive(t *testing.T) {
	for _, tc := range []struct {
		name     string
		table    string // preset
		to       string
		replaced bool
		tables   tablesMarker
		want     map[string]string // table -> statuses
		warn     []string          // the warnings expected, by a part of each
	}{
		{name: "cut-over", table: "producer-message", to: "_t_del", replaced: true,
			tables: tablesMarker{"shop.producer_message": pendingRows(4, "m-"), "shop._t_del": pendingRows(4, "m-")},
			want:   map[string]string{"shop.producer_message": "1:SENT 2:SENT 3:SENT 4:RETRY", "shop._t_del": "1:SENT 2:SENT 3:SENT 4:RETRY"}},
		{name: "cut-over, old table dropped", table: "producer-message", to: "_t_old", replaced: true,
			tables: tablesMarker{"shop.producer_message": pendingRows(4, "m-")},
			want:   map[string]string{"shop.producer_message": "1:SENT 2:SENT 3:SENT 4:RETRY", "shop._t_old": "(missing)"}},
		{name: "archival", table: "producer-message", to: "t_2026_11", replaced: true,
			tables: tablesMarker{"shop.producer_message": pendingRows(4, "new-"), "shop.t_2026_11": pendingRows(4, "m-")},
			want: map[string]string{"shop.producer_message": "1:PENDING 2:PENDING 3:PENDING 4:PENDING",
				"shop.t_2026_11": "1:SENT 2:SENT 3:SENT 4:RETRY"},
			warn: []string{"the sweeper reads the configured tables only"}},
		{name: "renamed away, nothing in its place", table: "producer-message", to: "t_old",
			tables: tablesMarker{"shop.t_old": pendingRows(4, "m-")},
			want:   map[string]string{"shop.t_old": "1:SENT 2:SENT 3:SENT 4:RETRY", "shop.producer_message": "(missing)"},
			warn:   []string{"the sweeper reads the configured tables only"}},
		{name: "no message-id column of its own", table: "local-message", to: "_t_del", replaced: true,
			tables: tablesMarker{"shop.local_message": pendingRows(4, "m-"), "shop._t_del": pendingRows(4, "m-")},
			want: map[string]string{"shop.local_message": "1:PENDING 2:PENDING 3:PENDING 4:PENDING",
				"shop._t_del": "1:SENT 2:SENT 3:SENT 4:RETRY"},
			warn: []string{"the sweeper reads the configured tables only", "cannot be matched there"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := presetTable(t, tc.table, "")
			r, logs := testRelay(t, tb, "")
			r.marker = tc.tables
			ctx := context.Background()
			batches := make(chan batch, 4)
			c := &committer{r: r, stop: ctx, pending: map[*outbox.Table]*rowstatus.Marks{}, batches: batches}
			for id := 1; id <= 4; id++ {
				row := markedRow(tb, id, 0, "k")
				row.Values[tb.Columns.ID] = id
				msgID := row.Values[tb.Columns.MessageID]
				if id == 4 {
					if err := c.fail(ctx, row, "orders", errors.New("nacked")); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if c.pending[tb] == nil {
					c.pending[tb] = &rowstatus.Marks{}
				}
				c.pending[tb].Add(id, msgID)
				c.count++
			}
			rn := renameTicket{&binlog.Rename{Table: tb, Schema: "shop", Name: tc.to, Replaced: tc.replaced}}
			if err := rn.apply(ctx, c, publisher.Result[Ticket]{}); err != nil {
				t.Fatal(err)
			}
			close(batches)
			if err := (&recorder{r: r}).run(ctx, batches); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				if got := tc.tables.statuses(name); got != want {
					t.Errorf("%s: %s, want %s", name, got, want)
				}
			}
			var warned []string
			for _, e := range logs.All() {
				if strings.Contains(e.Message, "renamed") || strings.Contains(e.Message, "rename") {
					warned = append(warned, e.Message)
				}
			}
			if len(warned) != len(tc.warn) {
				t.Errorf("warnings %q, want %d: %q", warned, len(tc.warn), tc.warn)
			}
			for _, w := range tc.warn {
				if !slices.ContainsFunc(warned, func(m string) bool { return strings.Contains(m, w) }) {
					t.Errorf("warnings %q, want one saying %q", warned, w)
				}
			}
			if n := r.Stats.AlreadySent.Load(); n != 0 {
				t.Errorf("%d counted as already sent, want 0", n)
			}
		})
	}
}

// A failure recorded by name after the primary ran an archival rename and
// before the relay read it ("RENAME TABLE t TO t_2026_11, t_new TO t")
// finds the new table's rows (other messages under the same ids) and
// records nothing; when the rename reaches the relay, the record is
// written again where the row lives, as the marks are, and the row is not
// left PENDING without a reason. A record that had landed is not counted
// twice.
func TestFailureInARenamesWindowIsRecordedWhereTheRowLives(t *testing.T) {
	tb := presetTable(t, "producer-message", "")
	r, logs := testRelay(t, tb, "")
	tables := tablesMarker{"shop.producer_message": pendingRows(3, "new-"), "shop.t_2026_11": pendingRows(3, "m-")}
	r.marker = tables
	ctx := context.Background()
	batches := make(chan batch, 4)
	c := &committer{r: r, stop: ctx, pending: map[*outbox.Table]*rowstatus.Marks{}, batches: batches}
	w := &recorder{r: r}
	write := func() {
		for len(batches) > 0 {
			if err := w.write(ctx, <-batches); err != nil {
				t.Fatal(err)
			}
		}
	}
	for id := 1; id <= 3; id++ {
		row := markedRow(tb, id, 0, "k")
		if id == 2 {
			if err := c.fail(ctx, row, "orders", errors.New("nacked")); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if c.pending[tb] == nil {
			c.pending[tb] = &rowstatus.Marks{}
		}
		c.pending[tb].Add(id, row.Values[tb.Columns.MessageID])
		c.count++
	}
	// Written by name: the primary ran the rename already.
	if err := c.flush(ctx, false, false); err != nil {
		t.Fatal(err)
	}
	write()
	rn := renameTicket{&binlog.Rename{Table: tb, Schema: "shop", Name: "t_2026_11", Replaced: true, Generation: 1}}
	if err := rn.apply(ctx, c, publisher.Result[Ticket]{}); err != nil {
		t.Fatal(err)
	}
	write()
	if got, want := tables.statuses("shop.t_2026_11"), "1:SENT 2:RETRY 3:SENT"; got != want {
		t.Errorf("the archive: %s, want %s", got, want)
	}
	if got, want := tables.statuses("shop.producer_message"), "1:PENDING 2:PENDING 3:PENDING"; got != want {
		t.Errorf("the new table: %s, want %s", got, want)
	}
	if n := logs.FilterLevelExact(zap.WarnLevel).FilterMessageSnippet("not recorded").Len(); n != 1 {
		t.Errorf("%d warnings that the failure was not recorded by name, want 1 (not an info line)", n)
	}
}

package relay

import (
	"context"
	"sync"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// namedPrimary is the primary (and, caught up, its replica) by table name,
// as local_message stores it: id -> row (status "0" pending, "1" sent).
type namedPrimary struct {
	mu     sync.Mutex
	tables map[string]map[string]*outbox.Row
}

func (p *namedPrimary) status(table string, id int) any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tables[table][colval.ValueString(id)].Values["status"]
}

// MarkSent matches by id alone, as MarkSentSQL does for a table without a
// message-id column of its own.
func (p *namedPrimary) MarkSent(_ context.Context, t *outbox.Table, m rowstatus.Marks) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, id := range m.IDs {
		if row := p.tables[t.Name][colval.ValueString(id)]; row != nil && row.Values["status"] == 0 {
			row.Values["status"] = 1
			n++
		}
	}
	return n, nil
}

func (p *namedPrimary) MarkRetryMany(context.Context, *outbox.Table, rowstatus.Attempt, rowstatus.Marks) (rowstatus.Outcome, int64, error) {
	return rowstatus.Retrying, 0, nil
}

// Sent answers as SentAmongSQL does: the SENT ids, each with its payload's
// CRC32.
func (p *namedPrimary) Sent(_ context.Context, t *outbox.Table, ids []any) (map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for _, id := range ids {
		k := colval.ValueString(id)
		if row := p.tables[t.Name][k]; row != nil && row.Values["status"] == 1 {
			out[k] = rowstatus.Fingerprint(t, row.Values)
		}
	}
	return out, nil
}

// A mark by id alone (local_message), written by name after the primary
// rotated the table ("RENAME TABLE local_message TO local_message_2026,
// local_message_new TO local_message") and before the reader read the
// rename, lands on the new table's row with the same id: SENT, never
// published. A restart then replays from past the old row; the rename
// comes before the new row, and the replay check must not take the new
// row for a published one (the sweeper leaves SENT rows alone: it would be
// lost). Found by review; the check trusted the replica's SENT here.
func TestAMarkByIDOnARotatedTablesRowDoesNotSkipIt(t *testing.T) {
	ctx := context.Background()
	tb := presetTable(t, "local-message", "")
	r, _ := testRelay(t, tb, "")
	old := localMessageRow(tb, 1, "an order")
	prim := &namedPrimary{tables: map[string]map[string]*outbox.Row{"local_message": {"1": localMessageRow(tb, 1, "an order")}}}
	r.marker = prim

	// Run 1: row 1 is published and confirmed; its mark waits for the batch.
	batches := make(chan batch, 4)
	c := &committer{r: r, stop: ctx, pending: map[*outbox.Table]*rowstatus.Marks{}, batches: batches}
	res := publisher.Result[Ticket]{Job: publisher.Job[Ticket]{Msg: &router.Message{Exchange: "orders"}}}
	if err := c.row(ctx, &inflightRow{row: old}, res); err != nil {
		t.Fatal(err)
	}
	// Meanwhile the primary rotates the table, and the application inserts
	// the new table's row 1.
	prim.mu.Lock()
	prim.tables["local_message_2026"] = prim.tables["local_message"]
	prim.tables["local_message"] = map[string]*outbox.Row{"1": localMessageRow(tb, 1, "a refund")}
	prim.mu.Unlock()
	if err := c.flush(ctx, false, false); err != nil {
		t.Fatal(err)
	}
	if err := (&recorder{r: r}).write(ctx, <-batches); err != nil {
		t.Fatal(err)
	}
	if prim.status("local_message", 1) != 1 || prim.status("local_message_2026", 1) != 0 {
		t.Fatal("setup: the old row's mark was expected to land on the new table's row 1")
	}

	// Run 2 resumes past the old row: the rename, then the new row 1, as
	// route takes them (next): the rename first, between chunks (a chunk
	// starts at a row; the rename once went by unchecked here).
	r.cfg.Sent = prim
	chk := r.newReplayCheck()
	fresh := localMessageRow(tb, 1, "a refund")
	events := make(chan binlog.Event, 4)
	for _, ev := range []binlog.Event{
		{Kind: binlog.KindRename, Rename: &binlog.Rename{Table: tb, Schema: tb.Schema, Name: "local_message_2026", Replaced: true}},
		{Kind: binlog.KindCommit, Commit: binlog.Commit{File: "bin.000001", Pos: 200}},
		{Kind: binlog.KindRow, Row: fresh},
		{Kind: binlog.KindCommit, Commit: binlog.Commit{File: "bin.000001", Pos: 300}},
	} {
		events <- ev
	}
	close(events)
	skipped := false
	for ev := range events {
		for _, e := range chk.next(ctx, ev, events) {
			skipped = skipped || e.Kind == binlog.KindRow && chk.skips(e.Row)
		}
	}
	if skipped || chk.active {
		t.Fatalf("the new table's row 1 skipped: %v (check active %v); want it published: SENT only by the old row's mark", skipped, chk.active)
	}
	// The same chunk without the rename (a row SENT by its own mark) is
	// skipped: the check is not simply off for the table.
	chk = r.newReplayCheck()
	chk.check(ctx, []binlog.Event{{Kind: binlog.KindRow, Row: fresh}, {Kind: binlog.KindCommit, Commit: binlog.Commit{File: "bin.000001", Pos: 300}}})
	if !chk.skips(fresh) {
		t.Fatal("a row SENT with its own payload, no rename before it, was not skipped")
	}
}

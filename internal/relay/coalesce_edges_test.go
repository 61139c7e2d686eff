package relay

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// coalescingCommitter is a committer over tables a, b and c with one marks
// session, so a batch naming two or more tables keeps the marks of those
// with few rows (committer.coalesce), and one confirmed row of each of b
// and c waiting.
func coalescingCommitter(t *testing.T) (*committer, chan batch, []*outbox.Table) {
	t.Helper()
	var tables []*outbox.Table
	for _, name := range []string{"a", "b", "c"} {
		tb := *markedTable(t)
		tb.Name = "outbox_" + name
		tables = append(tables, &tb)
	}
	r, _ := testRelay(t, tables[0], "")
	r.cfg.MarkSessions = 1
	tracker, err := binlog.NewTracker(binlog.Position{Flavor: binlog.FlavorMariaDB, File: "b.000001", Pos: 4})
	if err != nil {
		t.Fatal(err)
	}
	batches := make(chan batch, 4)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	c := &committer{r: r, stop: context.Background(), tracker: tracker, pending: map[*outbox.Table]*rowstatus.Marks{},
		batches: batches, now: func() time.Time { return now }}
	ctx := context.Background()
	res := publisher.Result[Ticket]{Job: publisher.Job[Ticket]{Msg: &router.Message{Exchange: "orders"}}}
	for i, tb := range tables[1:] {
		if err := c.row(ctx, &inflightRow{row: markedRow(tb, i+1, 0, "k")}, res); err != nil {
			t.Fatal(err)
		}
	}
	// The flush keeps both (two tables for one session, one row each) and
	// hands the start position only, once.
	if err := c.flush(ctx, false, false); err != nil {
		t.Fatal(err)
	}
	if b := <-batches; b.rows != 0 || b.pos == nil || b.pos.Pos != 4 || c.kept != 2 {
		t.Fatalf("setup: a batch of %d rows at %v, %d marks kept; want the start position alone and 2 kept", b.rows, b.pos, c.kept)
	}
	return c, batches, tables
}

func batchTables(b batch) (names []string) {
	for t := range b.marks {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

// A batch that carries a rename keeps no marks: the rename's order against
// the marks matters (committer.coalesce). The rename cleared c.moving
// before coalesce looked at it, so the kept marks stayed kept.
func TestNothingIsKeptBesideARename(t *testing.T) {
	c, batches, tables := coalescingCommitter(t)
	ctx := context.Background()
	res := publisher.Result[Ticket]{Job: publisher.Job[Ticket]{Msg: &router.Message{Exchange: "orders"}}}
	if err := c.row(ctx, &inflightRow{row: markedRow(tables[0], 9, 0, "k")}, res); err != nil {
		t.Fatal(err)
	}
	rn := renameTicket{&binlog.Rename{Table: tables[0], Schema: tables[0].Schema, Name: "outbox_a_old"}}
	if err := rn.apply(ctx, c, res); err != nil {
		t.Fatal(err)
	}
	b := <-batches
	if b.moved == nil || len(b.moved.marks.IDs) != 1 || !slices.Equal(batchTables(b), []string{"outbox_b", "outbox_c"}) || c.count != 0 {
		t.Fatalf("the rename's batch: moved %v, marks of %v, %d left waiting; want the renamed table's mark moved and b's and c's marked, none kept",
			b.moved, batchTables(b), c.count)
	}
}

// A stream held behind a row it cannot record may hold for hours: the
// flush before the hold keeps no marks for a later batch that may never
// come (the rows would wait PENDING for the sweeper, duplicates).
func TestAHeldStreamKeepsNoMarks(t *testing.T) {
	c, batches, _ := coalescingCommitter(t)
	stop, cancel := context.WithCancel(context.Background())
	c.stop = stop
	done := make(chan error, 1)
	tb := debeziumTable(t)
	go func() {
		done <- c.holdUnrecorded(context.Background(), debeziumRow(tb, "e-1", "orders"), "orders", fmt.Errorf("refused"))
	}()
	var b batch
	select {
	case b = <-batches:
	case <-time.After(5 * time.Second):
		t.Fatal("no batch handed before the hold")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hold did not end at the stop")
	}
	if !slices.Equal(batchTables(b), []string{"outbox_b", "outbox_c"}) || c.count != 0 {
		t.Fatalf("the batch before the hold marks %v, %d left waiting; want b and c, none kept", batchTables(b), c.count)
	}
}

// A failed row's id and message id are copies: go-mysql's strings share
// the binlog event's buffer, and a failure is kept for minutes (the recent
// failures a rename writes again), which would keep the whole event.
func TestFailuresKeepCopiesOfTheirIDs(t *testing.T) {
	r, _ := testRelay(t, debeziumTable(t), "")
	tb := markedTable(t)
	c := &committer{r: r, stop: context.Background(), pending: map[*outbox.Table]*rowstatus.Marks{}, batches: make(chan batch, 4)}
	buf := []byte("m-77")
	view := unsafe.String(&buf[0], len(buf)) // as go-mysql decodes a VARCHAR
	row := markedRow(tb, 77, 0, "k")
	row.Values["message_id"] = view
	for range 2 { // a group's first row, then one added to it
		if err := c.fail(context.Background(), row, "gone", fmt.Errorf("%w: gone", publisher.ErrNoExchange)); err != nil {
			t.Fatal(err)
		}
	}
	copy(buf, "XXXX") // the event buffer is reused
	g := c.fails[0]
	if g.first != "m-77" || g.rows.MessageIDs[0] != "m-77" || g.rows.MessageIDs[1] != "m-77" {
		t.Fatalf("kept %q and %v after the buffer changed; want copies of m-77", g.first, g.rows.MessageIDs)
	}
}

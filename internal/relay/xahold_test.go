package relay

import (
	"context"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// A prepared XA branch's rows live only in the reader's memory until its
// XA COMMIT: no position past the prepare may be handed to the recorder, or
// a restart there would never read those rows again.
func TestCheckpointStaysBeforeAnOpenXABranch(t *testing.T) {
	r, _ := testRelay(t, debeziumTable(t), "")
	tracker, err := binlog.NewTracker(binlog.Position{Flavor: binlog.FlavorMariaDB, File: "b.000001", Pos: 4})
	if err != nil {
		t.Fatal(err)
	}
	batches := make(chan batch, 8)
	s := &committer{r: r, stop: context.Background(), tracker: tracker, pending: map[*outbox.Table]*rowstatus.Marks{}, batches: batches}
	ctx := context.Background()
	commit := func(pos uint32, openXA bool) {
		t.Helper()
		c := commitTicket{commit: binlog.Commit{File: "b.000001", Pos: pos, OpenXA: openXA}}
		if err := s.handle(ctx, publisher.Result[Ticket]{Job: publisher.Job[Ticket]{Tag: c}}); err != nil {
			t.Fatal(err)
		}
	}
	flushed := func() *binlog.Position {
		t.Helper()
		if err := s.flush(ctx, true, false); err != nil {
			t.Fatal(err)
		}
		return (<-batches).pos
	}

	// A prepare first of all: the start position is the one to keep (it
	// may never have been saved).
	commit(50, true)
	if p := flushed(); p == nil || p.Pos != 4 {
		t.Fatalf("checkpoint with a branch prepared first = %+v, want the start position (4)", p)
	}
	commit(60, false)
	if p := flushed(); p == nil || p.Pos != 60 {
		t.Fatalf("checkpoint after its XA COMMIT = %+v, want 60", p)
	}

	commit(100, false) // an ordinary transaction
	commit(200, true)  // XA PREPARE: the branch is held
	commit(300, true)  // another transaction while it is held
	if p := flushed(); p == nil || p.Pos != 100 {
		t.Fatalf("checkpoint while a branch is prepared = %+v, want the position before the prepare (100)", p)
	}
	commit(400, true)
	if p := flushed(); p != nil {
		t.Fatalf("a later flush while the branch is still prepared handed on %+v, want nothing", p)
	}
	commit(500, false) // XA COMMIT: the branch's rows were published
	if p := flushed(); p == nil || p.Pos != 500 {
		t.Fatalf("checkpoint after the XA COMMIT = %+v, want 500", p)
	}

	// A prepare right after a flush: the saved position is already safe.
	commit(600, true)
	if p := flushed(); p != nil {
		t.Fatalf("prepare right after a flush handed on %+v, want nothing", p)
	}
	commit(700, false)
	if p := flushed(); p == nil || p.Pos != 700 {
		t.Fatalf("checkpoint after the second XA COMMIT = %+v, want 700", p)
	}
}

package relay

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// headSent is a replica whose SENT rows are fixed, and whose CatchUp
// returns after: the commits made after the Run started.
type headSent struct {
	fakeSent
	after func(binlog.Commit) bool
}

func (h *headSent) CatchUp(context.Context, time.Duration) (func(binlog.Commit) bool, error) {
	return h.after, nil
}

// rowsTx is one transaction of rows from..to at pos.
func rowsTx(pos uint32, from, to int) tx {
	var ids []int
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return tx{pos, ids}
}

func messages(from, to int) []string {
	var out []string
	for id := from; id <= to; id++ {
		out = append(out, fmt.Sprint("m-", id))
	}
	return out
}

// CI's TestReplayedRowsAlreadySentAreNotPublishedAgain, on a loaded
// machine: the rows written after the restart came in one chunk with the
// last replayed rows, SENT, so the chunk was not one "with no row SENT"
// and the check went on, its log line never written while nothing more
// came. The first commit made after the Run started ends the check: the
// run before never read it.
func TestReplayCheckEndsAtTheFirstCommitAfterTheStart(t *testing.T) {
	lookup := &headSent{fakeSent: fakeSent{sent: sentUpTo(600)},
		after: func(c binlog.Commit) bool { return c.Pos >= 700 }}
	txs := []tx{rowsTx(100, 1, 100), rowsTx(200, 101, 200), rowsTx(300, 201, 300), rowsTx(400, 301, 400),
		rowsTx(500, 401, 500), rowsTx(600, 501, 600), rowsTx(700, 601, 610), rowsTx(800, 611, 620)}
	lane, _, _, logs := replayRun(t, lookup, "", nil, txs...)
	if got, want := lane.published(), messages(601, 620); !slices.Equal(got, want) {
		t.Fatalf("published %v, want only the rows written after the start %v", got, want)
	}
	lines := logs.FilterMessage("replayed rows already SENT were not published again").All()
	if len(lines) != 1 || lines[0].ContextMap()["skipped"] != int64(600) ||
		lines[0].ContextMap()["ended_at"] != "a transaction committed after the start" {
		t.Fatalf("the skip is logged as %v, want once with skipped 600, ended at a transaction committed after the start", lines)
	}
	for _, read := range lookup.reads {
		if slices.Contains(read, any(611)) {
			t.Fatalf("the check asked about row 611, after the commit made after the start")
		}
	}
}

// CI's TestSIGKILLsAcrossManyTenantsDuplicateOnlyRowsInFlight (MySQL 9.7,
// 50 tenants): past the checkpoint's reach, a chunk of rows kept unmarked
// (few per tenant, held for a later batch) had no row SENT, the check ended
// there, and 122 rows marked after them were published again. With the
// primary's position known, the check reads on until the first commit made
// after the start, or relay.max_unmarked rows in a row not SENT.
func TestReplayCheckReadsPastAChunkOfUnmarkedRows(t *testing.T) {
	sent := map[string]string{}
	for id := 601; id <= 700; id++ {
		sent[fmt.Sprint(id)] = fmt.Sprint("m-", id)
	}
	lookup := &headSent{fakeSent: fakeSent{sent: sent}, after: func(binlog.Commit) bool { return false }}
	lane, _, _, _ := replayRun(t, lookup, "", nil, rowsTx(100, 1, 600), rowsTx(200, 601, 700))
	if got, want := lane.published(), messages(1, 600); !slices.Equal(got, want) {
		t.Fatalf("published %d rows (%v ... ), want the 600 not SENT; the 100 SENT after them are duplicates", len(got), got[len(got)-1])
	}
}

// The check's reads stay bounded after a long outage, whose backlog the
// run before never read: past the reach, relay.max_unmarked rows in a row
// not SENT end it.
func TestReplayCheckEndsAfterMaxUnmarkedRowsNotSent(t *testing.T) {
	const limit = 4096 // relay.max_unmarked's default
	sent := map[string]string{}
	for id := limit + replayChunk + 101; id <= limit+replayChunk+110; id++ {
		sent[fmt.Sprint(id)] = fmt.Sprint("m-", id)
	}
	lookup := &headSent{fakeSent: fakeSent{sent: sent}, after: func(binlog.Commit) bool { return false }}
	lane, _, _, logs := replayRun(t, lookup, "", nil, rowsTx(100, 1, limit+replayChunk+100),
		rowsTx(200, limit+replayChunk+101, limit+replayChunk+110))
	if got, all := len(lane.published()), limit+replayChunk+110; got != all {
		t.Fatalf("published %d rows, want all %d: the check ends after %d rows in a row not SENT", got, all, limit)
	}
	lines := logs.FilterMessage("replayed rows checked: none was SENT already").All()
	if len(lines) != 1 || lines[0].ContextMap()["ended_at"] != "relay.max_unmarked rows in a row not SENT" {
		t.Fatalf("the check's end is logged as %v, want once, ended at relay.max_unmarked rows in a row not SENT", lines)
	}
	if checked := lines[0].ContextMap()["checked"].(int64); checked < limit || checked > limit+replayChunk {
		t.Fatalf("the check read %d rows, want %d to %d", checked, limit, limit+replayChunk)
	}
}

// slowHead is headSent whose replica takes wait to apply the primary's
// position: the Run's wait before its first read.
type slowHead struct {
	headSent
	wait time.Duration
}

func (h *slowHead) CatchUp(ctx context.Context, d time.Duration) (func(binlog.Commit) bool, error) {
	time.Sleep(h.wait)
	return h.headSent.CatchUp(ctx, d)
}

// The check's log line says how long of what it took was the wait for the
// replica (a restart on a replica behind the primary takes that long
// before the first row is published).
func TestReplayCheckLogsItsWaitForTheReplica(t *testing.T) {
	const wait = 40 * time.Millisecond
	lookup := &slowHead{headSent: headSent{fakeSent: fakeSent{sent: sentUpTo(100)},
		after: func(c binlog.Commit) bool { return c.Pos >= 200 }}, wait: wait}
	lane, _, _, logs := replayRun(t, lookup, "", nil, rowsTx(100, 1, 100), rowsTx(200, 101, 110))
	if got, want := lane.published(), messages(101, 110); !slices.Equal(got, want) {
		t.Fatalf("published %v, want only the rows written after the start %v", got, want)
	}
	lines := logs.FilterMessage("replayed rows already SENT were not published again").All()
	if len(lines) != 1 {
		t.Fatalf("the skip is logged %d times, want once", len(lines))
	}
	f := lines[0].ContextMap()
	waited, ok1 := f["waited_for_replica"].(time.Duration)
	took, ok2 := f["took"].(time.Duration)
	if !ok1 || !ok2 || waited < wait || waited > took {
		t.Fatalf("logged waited_for_replica %v and took %v, want at least %v and no more than took", f["waited_for_replica"], f["took"], wait)
	}
}

package relay

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// replaySchedule is a restart's replayed binlog as the check meets it:
// transactions of rows, each row SENT or not on the replica (runs of
// each: marked rows, rows kept for a later batch, rows in flight), the
// checkpoint's reach, the first transaction committed after the start
// (none when later is past the end), the bursts the reader brings them in
// (a chunk never spans two) and the check's run limit.
type replaySchedule struct {
	txs    [][]bool // per transaction, per row: SENT
	reach  uint64
	later  int
	bursts []int // events per burst
	limit  int
}

func drawReplaySchedule(t *rapid.T) replaySchedule {
	var s replaySchedule
	n := rapid.IntRange(1, 40).Draw(t, "txs")
	sent := rapid.Bool().Draw(t, "first run SENT")
	left := rapid.IntRange(1, 30).Draw(t, "first run")
	rows := 0
	for range n {
		tx := make([]bool, rapid.IntRange(1, 5).Draw(t, "rows"))
		for i := range tx {
			if left == 0 {
				sent, left = !sent, rapid.IntRange(1, 30).Draw(t, "run")
			}
			tx[i] = sent
			left--
		}
		s.txs = append(s.txs, tx)
		rows += len(tx)
	}
	s.later = rapid.IntRange(0, n+3).Draw(t, "later") // > n-1: none
	// Rows of transactions committed after the start were never read by
	// the run before: none is SENT by it.
	for i := s.later; i < n; i++ {
		for j := range s.txs[i] {
			s.txs[i][j] = false
		}
	}
	s.reach = uint64(rapid.IntRange(0, rows).Draw(t, "reach"))
	s.limit = rapid.IntRange(1, 40).Draw(t, "limit")
	events := rows + n
	for events > 0 {
		b := min(events, rapid.IntRange(1, 12).Draw(t, "burst"))
		s.bursts = append(s.bursts, b)
		events -= b
	}
	return s
}

// replayOutcome is what the check did: the rows it asked about and the
// ones it skipped, by id.
type replayOutcome struct {
	asked, skipped map[int]bool
	ends           int
	active         bool
}

func runReplaySchedule(t *testing.T, s replaySchedule) replayOutcome {
	tb := markedTable(t)
	r, _ := testRelay(t, tb, "")
	sent := map[string]string{}
	var evs []binlog.Event
	id := 0
	for i, tx := range s.txs {
		for _, isSent := range tx {
			id++
			if isSent {
				sent[fmt.Sprint(id)] = fmt.Sprint("m-", id)
			}
			evs = append(evs, binlog.Event{Kind: binlog.KindRow, Row: markedRow(tb, id, 0, "k")})
		}
		evs = append(evs, binlog.Event{Kind: binlog.KindCommit, Commit: binlog.Commit{File: "bin.000001", Pos: uint32(100 * (i + 1))}})
	}
	laterPos := uint32(100 * (s.later + 1))
	lookup := &headSent{fakeSent: fakeSent{sent: sent}, after: func(c binlog.Commit) bool { return c.Pos >= laterPos }}
	r.cfg.Sent = lookup
	chk := r.newReplayCheck()
	chk.reach, chk.runLimit = s.reach, s.limit
	ctx := context.Background()
	chk.catchUp(ctx)
	events := make(chan binlog.Event, len(evs))
	go func() {
		defer close(events)
		at := 0
		for _, b := range s.bursts {
			for _, ev := range evs[at : at+b] {
				events <- ev
			}
			at += b
			time.Sleep(replayGather + 5*time.Millisecond) // the gather's wait ends the chunk
		}
	}()
	out := replayOutcome{asked: map[int]bool{}, skipped: map[int]bool{}}
	for ev := range events {
		for _, e := range chk.next(ctx, ev, events) {
			if e.Kind == binlog.KindRow && chk.skips(e.Row) {
				out.skipped[e.Row.ID.(int)] = true
			}
		}
	}
	out.active = chk.active
	chk.end("the end of the stream (a stop)")
	for _, read := range lookup.reads {
		for _, id := range read {
			out.asked[id.(int)] = true
		}
	}
	return out
}

// The replay check over random schedules: it skips only rows SENT; it asks
// nothing of a row after the first transaction committed after the start
// (of that transaction's own rows, before its commit, it may),
// and is off once that commit is read, wherever the chunks fall; and a
// SENT row before it is published again only when, past the reach, at
// least the run limit of rows in a row not SENT came before it (the bound
// on the check's reads after a long outage).
func TestPropertyReplayCheckEndsOnlyWhereItMay(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := drawReplaySchedule(rt)
		var out replayOutcome
		synctest.Test(t, func(t *testing.T) { out = runReplaySchedule(t, s) })
		id, seq, unsent, mayEnd := 0, uint64(0), 0, false
		for i, tx := range s.txs {
			for _, isSent := range tx {
				id++
				seq++
				switch {
				case out.skipped[id] && !isSent:
					rt.Fatalf("row %d skipped, not SENT: lost", id)
				case i > s.later && out.asked[id]:
					// (The rows of that first transaction come before its
					// commit: they are asked, and are not SENT.)
					rt.Fatalf("row %d, in transaction %d, after the first committed after the start (%d), was asked about", id, i, s.later)
				case i < s.later && isSent && !out.skipped[id] && !mayEnd:
					rt.Fatalf("row %d SENT before the first transaction committed after the start, published again "+
						"with no run of %d rows not SENT past the reach %d before it", id, s.limit, s.reach)
				}
				switch {
				case isSent:
					unsent = 0
				case seq > s.reach:
					unsent++
				}
				mayEnd = mayEnd || unsent >= s.limit
			}
		}
		if s.later < len(s.txs) && out.active {
			rt.Fatalf("the check still on after transaction %d, committed after the start", s.later)
		}
	})
}

// Shrunk by TestPropertyReplayCheckEndsOnlyWhereItMay with route's old
// dispatch, which checked only chunks (they start at a row): the first
// commit made after the start came alone between two chunks, went by
// unchecked, and the check read on into later transactions. A rename of a
// table marked by id alone went by the same way, which lost a row
// (TestAMarkByIDOnARotatedTablesRowDoesNotSkipIt).
func TestReplayCheckSeesACommitBetweenChunks(t *testing.T) {
	s := replaySchedule{txs: [][]bool{{false}, {false}}, later: 0, limit: 40, bursts: []int{1, 1, 2}}
	var out replayOutcome
	synctest.Test(t, func(t *testing.T) { out = runReplaySchedule(t, s) })
	if out.asked[2] || out.active {
		t.Fatalf("row 2 asked about %v, check on %v: the commit of transaction 0, made after the start, alone between chunks, did not end it",
			out.asked[2], out.active)
	}
}

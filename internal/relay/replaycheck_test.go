package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// fakeSent is the source replica's view of which rows are SENT: ids with
// their message ids. It counts the reads and the ids each named.
type fakeSent struct {
	mu    sync.Mutex
	sent  map[string]string
	err   error
	reads [][]any
}

func (f *fakeSent) Sent(_ context.Context, _ *outbox.Table, ids []any) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, ids)
	if f.err != nil {
		return nil, f.err
	}
	out := map[string]string{}
	for _, id := range ids {
		if m, ok := f.sent[colval.ValueString(id)]; ok {
			out[colval.ValueString(id)] = m
		}
	}
	return out, nil
}

func sentUpTo(n int) map[string]string {
	m := map[string]string{}
	for id := 1; id <= n; id++ {
		m[fmt.Sprint(id)] = fmt.Sprint("m-", id)
	}
	return m
}

// cpStore keeps every checkpoint saved.
type cpStore struct {
	mu  sync.Mutex
	cps []checkpoint.Checkpoint
}

func (s *cpStore) Save(_ context.Context, c checkpoint.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cps = append(s.cps, c)
	return nil
}

func (s *cpStore) last() (checkpoint.Checkpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cps) == 0 {
		return checkpoint.Checkpoint{}, false
	}
	return s.cps[len(s.cps)-1], true
}

// replayRun runs the pipeline over txs with lookup as the replica and the
// relay resuming from resume, until the checkpoint reaches the last commit.
func replayRun(t *testing.T, lookup SentLookup, scope string, resume *checkpoint.Checkpoint, txs ...tx) (*fakeLane, *journal, *cpStore, *observer.ObservedLogs) {
	t.Helper()
	tb := markedTable(t)
	rt, err := router.New([]*outbox.Table{tb})
	if err != nil {
		t.Fatal(err)
	}
	lane, j, store := &fakeLane{}, &journal{}, &cpStore{}
	core, logs := observer.New(zap.InfoLevel)
	r := mustNew(t, Config{FlushInterval: 2 * time.Millisecond, CheckpointInterval: 2 * time.Millisecond, Buffer: 64,
		Sent: lookup, SeqScope: scope}, &fakeReader{events: script(tb, func(int) string { return "k" }, txs...)},
		rt, []Lane{lane}, &fakeMarker{j: j}, store, zap.New(core))
	start := binlog.Position{Flavor: binlog.FlavorMariaDB, File: "bin.000001", Pos: 4}
	if resume != nil {
		resume.Flavor, resume.File, resume.Pos = start.Flavor, start.File, start.Pos
		r.ResumeFrom(*resume)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, start) }()
	end := txs[len(txs)-1].pos
	waitFor(t, 5*time.Second, func() bool { c, ok := store.last(); return ok && c.Pos == end }, "checkpoint never reached %d", end)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of the stop")
	}
	return lane, j, store, logs
}

func TestReplayedRowsSentAlreadyAreNotPublished(t *testing.T) {
	txs := []tx{{100, []int{1, 2, 3}}, {200, []int{4, 5, 6}}, {300, []int{7, 8}}, {400, []int{9, 10}}}
	lookup := &fakeSent{sent: sentUpTo(6)}
	lane, j, _, logs := replayRun(t, lookup, "", nil, txs...)
	if got, want := lane.published(), []string{"m-7", "m-8", "m-9", "m-10"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want only the rows not SENT %v", got, want)
	}
	if got := j.ids("sent"); !slices.Equal(got, ids(7, 8, 9, 10)) {
		t.Fatalf("marked %v, want 7-10", got)
	}
	if n := len(lookup.reads); n != 1 {
		t.Errorf("%d replica reads, want 1 (one chunk): %v", n, lookup.reads)
	}
	lines := logs.FilterMessage("replayed rows already SENT were not published again").All()
	if len(lines) != 1 || lines[0].ContextMap()["skipped"] != int64(6) || lines[0].ContextMap()["checked"] != int64(10) {
		t.Fatalf("the skip is logged as %v, want once with skipped 6 of 10 checked", lines)
	}
}

// The check goes on past rows that are not SENT while others in their chunk
// are (a table's few marks kept for a later batch leave unmarked rows among
// marked ones), and past chunks with none SENT while they are within the
// rows the run before had handled (its checkpoint's reach: a chunk cut
// short may hold only kept rows). It ends at the first chunk with no row
// SENT past them; with no reach saved, at the first chunk with none. After
// that, a row that shows SENT (the sweeper sent it) is published all the
// same.
func TestReplayCheckGoesOnToTheReachOfTheRunBefore(t *testing.T) {
	tb := markedTable(t)
	chunk := func(from, to int) []binlog.Event {
		var evs []binlog.Event
		for id := from; id <= to; id++ {
			evs = append(evs, binlog.Event{Kind: binlog.KindRow, Row: markedRow(tb, id, 0, "k")},
				binlog.Event{Kind: binlog.KindCommit, Commit: binlog.Commit{File: "bin.000001", Pos: uint32(100 * id)}})
		}
		return evs
	}
	skipped := func(c *replayCheck, evs []binlog.Event) (ids []any) {
		for _, ev := range evs {
			if ev.Kind == binlog.KindRow && c.skips(ev.Row) {
				ids = append(ids, ev.Row.ID)
			}
		}
		return ids
	}
	type step struct {
		from, to int
		skip     []any
		active   bool
	}
	for _, run := range []struct {
		name  string
		reach uint64
		steps []step
		reads int
	}{
		{"reach 9", 9, []step{
			{1, 5, ids(1, 2, 4), true}, // 3 and 5 kept unmarked among marked rows
			{6, 8, nil, true},          // a short chunk of kept rows only, within the reach
			{9, 9, ids(9), true},       // a marked row after them
			{10, 12, nil, false},       // none SENT past the reach: the check ends
			{13, 13, nil, false},       // the sweeper sent 13: published all the same
		}, 4},
		{"no reach", 0, []step{
			{1, 5, ids(1, 2, 4), true},
			{6, 8, nil, false},
			{9, 9, nil, false},
		}, 2},
	} {
		t.Run(run.name, func(t *testing.T) {
			r, _ := testRelay(t, tb, "")
			lookup := &fakeSent{sent: map[string]string{"1": "m-1", "2": "m-2", "4": "m-4", "9": "m-9", "13": "m-13"}}
			r.cfg.Sent = lookup
			c := r.newReplayCheck()
			c.reach = run.reach
			for _, st := range run.steps {
				evs := chunk(st.from, st.to)
				if c.active {
					c.check(context.Background(), evs)
				} else {
					clear(c.skip)
				}
				if got := skipped(c, evs); !slices.Equal(got, st.skip) || c.active != st.active {
					t.Fatalf("rows %d-%d: skipped %v (check active %v), want %v (active %v)", st.from, st.to, got, c.active, st.skip, st.active)
				}
			}
			if n := len(lookup.reads); n != run.reads {
				t.Fatalf("%d replica reads, want one per chunk checked (%d)", n, run.reads)
			}
		})
	}
}

// A restart from a checkpoint held before a kept row: the first chunk the
// check reads (500 rows) holds none SENT, and the marked rows come after
// it. The checkpoint's reach says the run before handled 600 rows past
// it, so the check reads on and skips them; without the reach it ends at
// the first chunk and they are published again.
func TestReplayCheckReadsOnToTheCheckpointsReach(t *testing.T) {
	var first, second []int
	for id := 1; id <= replayChunk; id++ {
		first = append(first, id)
	}
	for id := replayChunk + 1; id <= replayChunk+100; id++ {
		second = append(second, id)
	}
	sent := map[string]string{}
	for _, id := range second {
		sent[fmt.Sprint(id)] = fmt.Sprint("m-", id)
	}
	for _, c := range []struct {
		reach     uint64
		published int
	}{{replayChunk + 100, replayChunk}, {0, replayChunk + 100}} {
		lane, _, _, _ := replayRun(t, &fakeSent{sent: sent}, "", &checkpoint.Checkpoint{Reach: c.reach},
			tx{100, first}, tx{200, second})
		if got := len(lane.published()); got != c.published {
			t.Errorf("reach %d: published %d rows, want %d", c.reach, got, c.published)
		}
	}
}

// localMessageRow is a pending local_message row (its message id is its id).
func localMessageRow(tb *outbox.Table, id int, body string) *outbox.Row {
	return &outbox.Row{Table: tb, ID: id, Values: map[string]any{"id": id, "exchange": "orders", "routing_key": "k",
		"message_body": []byte(body), "status": 0, "retry_count": 0, "biz_id": "order-1", "biz_type": "order"}}
}

// A table marked by id alone (local_message) has its rows told apart by
// their payload: a replayed row whose id the replica shows SENT with
// another payload (the table's ids started again) is published.
func TestReplayCheckTellsRowsOfOneIDApartByPayload(t *testing.T) {
	tb := presetTable(t, "local-message", "")
	r, _ := testRelay(t, tb, "")
	fp := func(body string) string { return rowstatus.Fingerprint(tb, localMessageRow(tb, 0, body).Values) }
	r.cfg.Sent = &fakeSent{sent: map[string]string{"1": fp("a"), "2": fp("another"), "3": fp("c")}}
	rows := []*outbox.Row{localMessageRow(tb, 1, "a"), localMessageRow(tb, 2, "b"), localMessageRow(tb, 3, "c")}
	var evs []binlog.Event
	for _, row := range rows {
		evs = append(evs, binlog.Event{Kind: binlog.KindRow, Row: row})
	}
	c := r.newReplayCheck()
	c.check(context.Background(), append(evs, binlog.Event{Kind: binlog.KindCommit, Commit: binlog.Commit{File: "bin.000001", Pos: 300}}))
	if !c.skips(rows[0]) || c.skips(rows[1]) || !c.skips(rows[2]) {
		t.Fatalf("skipped 1: %v, 2: %v, 3: %v; want 1 and 3 (same payload), not 2 (another payload under its id)",
			c.skips(rows[0]), c.skips(rows[1]), c.skips(rows[2]))
	}
}

func TestReplayCheckSkipsOnlyTheSameMessage(t *testing.T) {
	// Row 2's id is SENT under another message id (the row was replaced):
	// the replayed row 2 is another message, and is published.
	lookup := &fakeSent{sent: map[string]string{"1": "m-1", "2": "other", "3": "m-3"}}
	lane, _, _, _ := replayRun(t, lookup, "", nil, tx{100, []int{1, 2, 3, 4}})
	if got, want := lane.published(), []string{"m-2", "m-4"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
}

func TestReplayCheckThatCannotReadPublishesAll(t *testing.T) {
	lookup := &fakeSent{err: errors.New("replica down"), sent: sentUpTo(4)}
	lane, _, _, logs := replayRun(t, lookup, "", nil, tx{100, []int{1, 2}}, tx{200, []int{3, 4}})
	if got := lane.published(); len(got) != 4 {
		t.Fatalf("published %v, want all 4 rows (duplicates, never a loss)", got)
	}
	if w := logs.FilterMessageSnippet("publishing them all again").All(); len(w) != 1 || !strings.Contains(fmt.Sprint(w[0].ContextMap()["error"]), "replica down") {
		t.Fatalf("warnings %v, want one naming the error", w)
	}
}

func TestPublishingIDsFollowBinlogOrderAcrossSkips(t *testing.T) {
	// Resumed at a checkpoint whose rows took ids up to 40: rows 1-3 (SENT)
	// take 41-43 unpublished, rows 4-5 are published with 44 and 45, and the
	// last checkpoint saves 45 under the scope.
	lookup := &fakeSent{sent: sentUpTo(3)}
	lane, _, store, _ := replayRun(t, lookup, "scope-a", &checkpoint.Checkpoint{Seq: 40, SeqScope: "scope-a"},
		tx{100, []int{1, 2}}, tx{200, []int{3, 4}}, tx{300, []int{5}})
	seqs := publishedSeqs(lane)
	if !slices.Equal(seqs, []uint64{44, 45}) {
		t.Fatalf("publishing ids %v, want [44 45]", seqs)
	}
	if cp, _ := store.last(); cp.Seq != 45 || cp.SeqScope != "scope-a" {
		t.Fatalf("last checkpoint saved seq %d scope %q, want 45 scope-a", cp.Seq, cp.SeqScope)
	}
}

func TestPublishingIDsOfAnotherScopeStartAboveTheFloor(t *testing.T) {
	// A checkpoint saved under another scope (tables or lanes changed) does
	// not resume its ids: they start above the floor (the broker's last).
	lane, _, _, _ := replayRun(t, nil, "scope-b", &checkpoint.Checkpoint{Seq: 40, SeqScope: "scope-a"}, tx{100, []int{1, 2}})
	seqs := publishedSeqs(lane)
	if !slices.Equal(seqs, []uint64{1, 2}) {
		t.Fatalf("publishing ids %v, want [1 2] (floor 0)", seqs)
	}
}

func TestCheckpointSavedWithEachMarkBatch(t *testing.T) {
	// The timer is an hour: every save comes from a mark batch.
	tb := markedTable(t)
	rt, err := router.New([]*outbox.Table{tb})
	if err != nil {
		t.Fatal(err)
	}
	var txs []tx
	for i := 1; i <= 5; i++ {
		txs = append(txs, tx{uint32(100 * i), []int{i}})
	}
	gate := make(chan struct{})
	lane, j, store := &fakeLane{gate: gate}, &journal{}, &cpStore{}
	r := mustNew(t, Config{FlushInterval: time.Millisecond, CheckpointInterval: time.Hour, BatchSize: 1, Buffer: 64},
		&fakeReader{events: script(tb, func(int) string { return "k" }, txs...)}, rt, []Lane{lane}, &fakeMarker{j: j}, store, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, binlog.Position{Flavor: binlog.FlavorMariaDB, File: "bin.000001", Pos: 4}) }()
	close(gate)
	waitFor(t, 5*time.Second, func() bool { c, ok := store.last(); return ok && c.Pos == 500 }, "no checkpoint at the last commit within 5s, with the timer an hour away")
	cancel()
	<-done
}

func TestReplayCheckPublishesARowAgainInItsTransaction(t *testing.T) {
	// Row 1 comes twice in its transaction (sent early, then its committed
	// version): SENT on the replica by the early version's mark, the
	// committed version is published all the same.
	lookup := &fakeSent{sent: sentUpTo(2)}
	lane, _, _, _ := replayRun(t, lookup, "", nil, tx{100, []int{1, 2, 1, 3}})
	if got, want := lane.published(), []string{"m-1", "m-3"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v (the committed version of row 1, and row 3)", got, want)
	}
}

// publishedSeqs are the publishing ids of the messages a lane was given.
func publishedSeqs(lane *fakeLane) []uint64 {
	lane.mu.Lock()
	defer lane.mu.Unlock()
	var seqs []uint64
	for _, j := range lane.got {
		if j.Msg != nil {
			seqs = append(seqs, j.Seq)
		}
	}
	return seqs
}

// catchUpSent is a replica that has applied the marks up to rows 1-3 when
// the Run starts; CatchUp brings it to rows 1-6 (the last marks of the run
// before), or fails with err.
type catchUpSent struct {
	fakeSent
	err      error
	catchUps int
	readsAt  []int // reads made before each CatchUp
}

func (c *catchUpSent) CatchUp(context.Context, time.Duration) (func(binlog.Commit) bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.catchUps++
	c.readsAt = append(c.readsAt, len(c.reads))
	if c.err != nil {
		return nil, c.err
	}
	c.sent = sentUpTo(6)
	return nil, nil
}

// Before its first read the check waits for the replica to apply the
// primary's marks, once per Run: rows the run before marked just ahead of
// its end are not published again.
func TestReplayCheckWaitsForTheReplicaFirst(t *testing.T) {
	txs := []tx{{100, []int{1, 2, 3}}, {200, []int{4, 5, 6}}, {300, []int{7, 8}}, {400, []int{9, 10}}}
	lookup := &catchUpSent{fakeSent: fakeSent{sent: sentUpTo(3)}}
	lane, _, _, _ := replayRun(t, lookup, "", nil, txs...)
	if got, want := lane.published(), []string{"m-7", "m-8", "m-9", "m-10"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want only the rows not SENT once the replica caught up %v", got, want)
	}
	if lookup.catchUps != 1 || lookup.readsAt[0] != 0 {
		t.Fatalf("CatchUp called %d times, before reads %v; want once, before the first read", lookup.catchUps, lookup.readsAt)
	}
}

// A replica that does not catch up costs duplicates, never rows: the check
// reads what the replica has and says why more is published.
func TestReplayCheckGoesOnWhenTheReplicaDoesNotCatchUp(t *testing.T) {
	txs := []tx{{100, []int{1, 2, 3}}, {200, []int{4, 5, 6}}, {300, []int{7, 8}}, {400, []int{9, 10}}}
	lookup := &catchUpSent{fakeSent: fakeSent{sent: sentUpTo(3)}, err: errors.New("the replica had not applied the primary's position within 3s")}
	lane, _, _, logs := replayRun(t, lookup, "", nil, txs...)
	if got, want := lane.published(), []string{"m-4", "m-5", "m-6", "m-7", "m-8", "m-9", "m-10"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want every row the replica does not show SENT %v", got, want)
	}
	if n := logs.FilterMessageSnippet("had not applied the primary's latest SENT marks").Len(); n != 1 {
		t.Fatalf("%d log lines say the replica did not catch up, want 1", n)
	}
}

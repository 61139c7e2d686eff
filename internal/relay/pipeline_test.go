package relay

// The whole pipeline (reader, router, lanes, committer, recorder) over the
// fakes: what a user would check after a run, the messages published, the
// rows marked and the checkpoint saved.

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// tx is one source transaction of a script: its rows (by id) and the
// position after its commit.
type tx struct {
	pos  uint32
	rows []int
}

// script turns transactions into the reader's events; key gives each row's
// partition key, so its lane.
func script(tb *outbox.Table, key func(id int) string, txs ...tx) []binlog.Event {
	var evs []binlog.Event
	for _, x := range txs {
		for _, id := range x.rows {
			evs = append(evs, binlog.Event{Kind: binlog.KindRow, Row: markedRow(tb, id, 0, key(id))})
		}
		evs = append(evs, binlog.Event{Kind: binlog.KindCommit, Commit: binlog.Commit{File: "bin.000001", Pos: x.pos}})
	}
	return evs
}

// pipeline is one Relay.Run over fakes.
type pipeline struct {
	r      *Relay
	j      *journal
	cancel context.CancelFunc
	done   chan error
}

func startPipeline(t *testing.T, tb *outbox.Table, reader *fakeReader, lanes ...*fakeLane) *pipeline {
	t.Helper()
	rt, err := router.New([]*outbox.Table{tb}, router.WithAppID("relay-test"))
	if err != nil {
		t.Fatal(err)
	}
	ls := make([]Lane, len(lanes))
	for i, l := range lanes {
		ls[i] = l
	}
	j := &journal{}
	r := mustNew(t, Config{FlushInterval: 2 * time.Millisecond, CheckpointInterval: 2 * time.Millisecond, Buffer: 64, Server: func() string { return "test" }},
		reader, rt, ls, &fakeMarker{j: j}, &fakeStore{j: j}, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{r: r, j: j, cancel: cancel, done: make(chan error, 1)}
	start := binlog.Position{Flavor: binlog.FlavorMariaDB, File: "bin.000001", Pos: 4}
	go func() { p.done <- r.Run(ctx, start) }()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// stop ends the run gracefully and returns Run's error.
func (p *pipeline) stop(t *testing.T) error {
	t.Helper()
	p.cancel()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of the stop")
		return nil
	}
}

// finish waits for the checkpoint to reach cp, stops the run and checks
// the outcome.
func (p *pipeline) finish(t *testing.T, cp uint32, sent []any, txs []tx) {
	t.Helper()
	waitFor(t, 5*time.Second, func() bool { return p.j.last() == cp }, "checkpoint at %d, want %d", p.j.last(), cp)
	if err := p.stop(t); err != nil {
		t.Fatalf("a graceful stop returned %v", err)
	}
	p.check(t, cp, sent, txs)
}

// check looks at the run as a user would: the last checkpoint, the rows
// marked SENT, and the order of every write (checkCommitOrder).
func (p *pipeline) check(t *testing.T, cp uint32, sent []any, txs []tx) {
	t.Helper()
	if got := p.j.last(); got != cp {
		t.Fatalf("checkpoint at %d, want %d: %v", got, cp, p.j.all())
	}
	if got := p.j.ids("sent"); !slices.Equal(got, sent) {
		t.Fatalf("rows marked SENT %v, want %v", got, sent)
	}
	checkCommitOrder(t, p.j, txs)
}

// checkCommitOrder checks the journal as a user would after a run: rows
// marked SENT in binlog order, and so the rows sent to the retry path (a
// batch writes its marks before its failures), checkpoints only at commits and never moving back,
// and each one saved only after every row of the transactions it covers was
// marked or sent to the retry path.
func checkCommitOrder(t *testing.T, j *journal, txs []tx) {
	t.Helper()
	done := map[any]bool{}
	last, lastID := uint32(0), map[string]int{}
	for _, e := range j.all() {
		switch e.kind {
		case "checkpoint":
			if e.pos < last {
				t.Fatalf("checkpoint moved back from %d to %d", last, e.pos)
			}
			last = e.pos
			covered := false
			for _, x := range txs {
				if x.pos > e.pos {
					continue
				}
				covered = covered || x.pos == e.pos
				for _, id := range x.rows {
					if !done[id] {
						t.Fatalf("checkpoint %d saved before row %d of the transaction at %d was settled: %v", e.pos, id, x.pos, j.all())
					}
				}
			}
			if !covered {
				t.Fatalf("checkpoint %d is not at a commit", e.pos)
			}
		default:
			id := e.id.(int)
			if id <= lastID[e.kind] || done[id] {
				t.Fatalf("row %d written %s after row %d: not in binlog order: %v", id, e.kind, lastID[e.kind], j.all())
			}
			done[id], lastID[e.kind] = true, id
		}
	}
}

func ids(n ...int) []any {
	out := make([]any, len(n))
	for i, v := range n {
		out[i] = v
	}
	return out
}

// Confirms that arrive out of order across lanes (the lane with the later
// rows confirms first) are still settled in binlog order: rows marked SENT
// in commit order and each checkpoint saved after the rows it covers.
func TestSettlesInCommitOrder(t *testing.T) {
	tb := markedTable(t)
	txs := []tx{{100, []int{1, 2}}, {200, []int{3}}, {300, []int{4, 5}}, {400, []int{6}}}
	for _, tc := range []struct {
		name   string
		late   int   // the lane that confirms last
		before []any // the rows marked before it confirms: those ahead of its first row
	}{{"first lane confirms last", 0, nil}, {"second lane confirms last", 1, ids(1)}} {
		t.Run(tc.name, func(t *testing.T) {
			// Odd rows on lane 0, even rows on lane 1.
			key := func(id int) string { return keyOnLane((id+1)%2, 2) }
			lanes := []*fakeLane{{}, {}}
			lanes[tc.late].gate = make(chan struct{})
			early := lanes[1-tc.late]
			p := startPipeline(t, tb, &fakeReader{events: script(tb, key, txs...)}, lanes...)
			waitFor(t, 5*time.Second, func() bool { return early.confirmed.Load() == 3 },
				"the early lane confirmed %d rows, want its 3", early.confirmed.Load())
			waitFor(t, 5*time.Second, func() bool { return slices.Equal(p.j.ids("sent"), tc.before) },
				"rows marked %v, want %v", p.j.ids("sent"), tc.before)
			holds(t, 20*time.Millisecond, func() error {
				if sent, cps := p.j.ids("sent"), p.j.checkpoints(); !slices.Equal(sent, tc.before) || len(cps) != 0 {
					return fmt.Errorf("rows marked %v and checkpoints %v while the late lane had not confirmed, want %v and none",
						sent, cps, tc.before)
				}
				return nil
			})
			close(lanes[tc.late].gate)
			p.finish(t, 400, ids(1, 2, 3, 4, 5, 6), txs)
		})
	}
}

// The checkpoint is capped at the lowest unfinished transaction: later
// transactions fully confirmed on another lane do not move it past an
// earlier one whose row is still in flight.
func TestCheckpointCappedAtLowestUnfinishedTransaction(t *testing.T) {
	tb := markedTable(t)
	txs := []tx{{100, []int{1}}, {200, []int{2, 3}}, {300, []int{4}}, {400, []int{5}}, {500, []int{6}}}
	held, free := &fakeLane{gate: make(chan struct{})}, &fakeLane{}
	key := func(id int) string { // row 3 alone on the held lane
		if id == 3 {
			return keyOnLane(0, 2)
		}
		return keyOnLane(1, 2)
	}
	p := startPipeline(t, tb, &fakeReader{events: script(tb, key, txs...)}, held, free)
	waitFor(t, 5*time.Second, func() bool { return free.confirmed.Load() == 5 }, "the free lane confirmed %d rows, want 5", free.confirmed.Load())
	waitFor(t, 5*time.Second, func() bool { return p.j.last() == 100 }, "checkpoint at %d, want 100 (tx 1 settled)", p.j.last())
	waitFor(t, 5*time.Second, func() bool { return slices.Equal(p.j.ids("sent"), ids(1, 2)) }, "rows marked %v, want 1 and 2", p.j.ids("sent"))
	holds(t, 20*time.Millisecond, func() error {
		if got := p.j.last(); got != 100 {
			return fmt.Errorf("checkpoint moved to %d while row 3 of the transaction at 200 was in flight", got)
		}
		if got := p.j.ids("sent"); !slices.Equal(got, ids(1, 2)) {
			return fmt.Errorf("rows marked %v while row 3 was in flight, want 1 and 2 (the rows before it)", got)
		}
		return nil
	})
	close(held.gate)
	p.finish(t, 500, ids(1, 2, 3, 4, 5, 6), txs)
}

// A row the broker refuses: in strict mode it holds the stream (nothing
// behind it is published, the checkpoint stays before it, readiness names
// it) and is retried until the broker takes it, then the rest flows on; out
// of strict mode it goes to the retry path and the stream goes on.
func TestRefusedRowStrictHold(t *testing.T) {
	tb := markedTable(t)
	txs := []tx{{100, []int{1}}, {200, []int{2, 3}}, {300, []int{4}}}
	for _, tc := range []struct {
		name    string
		strict  bool
		sent    []any
		retried []any
	}{
		{"strict holds and retries", true, ids(1, 2, 3, 4), nil},
		{"not strict goes on", false, ids(1, 3, 4), ids(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var accept atomic.Bool
			lane := &fakeLane{strict: tc.strict, refuse: func(id string) error {
				if id == "m-2" && !accept.Load() {
					return fmt.Errorf("%w: %q (404 NOT_FOUND)", publisher.ErrNoExchange, "orders")
				}
				return nil
			}}
			p := startPipeline(t, tb, &fakeReader{events: script(tb, func(int) string { return "k" }, txs...)}, lane)
			if tc.strict {
				waitStrictHold(t, p, lane)
				accept.Store(true)
			}
			p.finish(t, 300, tc.sent, txs)
			if _, held := p.r.Holding(); held {
				t.Fatal("still holding after the broker took the row")
			}
			if got := p.j.ids("retry"); !slices.Equal(got, tc.retried) {
				t.Fatalf("rows sent to the retry path %v, want %v", got, tc.retried)
			}
		})
	}
}

// waitStrictHold waits until the refused row m-2 was retried with backoff
// and checks what a user sees meanwhile: the hold named, only m-2 offered
// again and again, the checkpoint and the marks before it.
func waitStrictHold(t *testing.T, p *pipeline, lane *fakeLane) {
	t.Helper()
	waitFor(t, 5*time.Second, func() bool { h, ok := p.r.Holding(); return ok && h.Attempts >= 3 },
		"no hold with 3 attempts reported for the refused row")
	if h, _ := p.r.Holding(); h.MessageID != "m-2" || h.Exchange != "orders" {
		t.Fatalf("hold %+v, want message m-2 to orders", h)
	}
	waitFor(t, 5*time.Second, func() bool { return p.j.last() == 100 }, "checkpoint at %d, want 100 (the transaction before the hold)", p.j.last())
	holds(t, 20*time.Millisecond, func() error {
		got := lane.published()
		if len(got) < 4 || got[0] != "m-1" || slices.ContainsFunc(got[1:], func(id string) bool { return id != "m-2" }) {
			return fmt.Errorf("published %v while m-2 was refused, want m-1 then only m-2, retried", got)
		}
		if cp, sent := p.j.last(), p.j.ids("sent"); cp != 100 || !slices.Equal(sent, ids(1)) {
			return fmt.Errorf("checkpoint %d and rows marked %v while m-2 was held, want 100 and row 1", cp, sent)
		}
		return nil
	})
	waitFor(t, 5*time.Second, func() bool { h, _ := p.r.Holding(); return h.Attempts >= 5 },
		"the held row is not retried while held")
}

// A stop that comes mid-transaction leaves the checkpoint at the last
// complete transaction: with the reader ending at the transaction's
// boundary, as binlog.Reader does, the transaction is finished, marked and
// saved; with a stream cut inside it, the checkpoint stays before it. Run
// returns nil either way (a graceful stop) and nothing is half-settled: no
// checkpoint names a position inside a transaction.
func TestStopAtTransactionBoundary(t *testing.T) {
	tb := markedTable(t)
	txs := []tx{{100, []int{1, 2}}, {200, []int{3, 4, 5}}, {300, []int{6}}}
	for _, tc := range []struct {
		name string
		cut  bool
		cp   uint32
		sent []any
	}{
		{"reader ends at the boundary", false, 200, ids(1, 2, 3, 4, 5)},
		{"stream cut inside the transaction", true, 100, ids(1, 2, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Pause after row 3, inside the transaction at 200.
			reader := &fakeReader{events: script(tb, func(int) string { return "k" }, txs...), pauseAt: 4, cut: tc.cut,
				paused: make(chan struct{})}
			lane := &fakeLane{}
			p := startPipeline(t, tb, reader, lane)
			select {
			case <-reader.paused:
			case <-time.After(5 * time.Second):
				t.Fatal("the reader never reached the middle of the transaction")
			}
			waitFor(t, 5*time.Second, func() bool { return lane.confirmed.Load() == 4 }, "confirmed %d, want 4 (rows 1-3 and a commit)", lane.confirmed.Load())
			if err := p.stop(t); err != nil {
				t.Fatalf("a graceful stop returned %v", err)
			}
			p.check(t, tc.cp, tc.sent, txs)
		})
	}
}

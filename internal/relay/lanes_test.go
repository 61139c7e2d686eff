package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

func TestKeyHashIsFNV1a(t *testing.T) {
	// Published FNV-1a 64 test vectors: the lane of a key must never
	// change between versions.
	for key, want := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c, "foobar": 0x85944171f73967e8} {
		if got := KeyHash(key); got != want {
			t.Errorf("KeyHash(%q) = %#x, want %#x", key, got, want)
		}
	}
}

func TestLaneOfSpreadsKeysAndPinsKeylessRowsToLaneZero(t *testing.T) {
	const lanes, keys = 4, 10000
	count := make([]int, lanes)
	for i := range keys {
		k := fmt.Sprintf("order-%d", i)
		l, h := LaneOf(&router.Message{PartitionKey: k, Keyed: true}, lanes)
		if l2, h2 := LaneOf(&router.Message{PartitionKey: k, Keyed: true}, lanes); l2 != l || h2 != h {
			t.Fatalf("key %s: lane %d then %d", k, l, l2)
		}
		count[l]++
	}
	for l, n := range count {
		if n < keys/lanes*8/10 || n > keys/lanes*12/10 {
			t.Errorf("lane %d has %d of %d keys: %v", l, n, keys, count)
		}
	}
	if l, h := LaneOf(&router.Message{PartitionKey: "", Keyed: false}, lanes); l != 0 || h != 0 {
		t.Errorf("a row without a key: lane %d key %d, want lane 0 key 0", l, h)
	}
}

// lanePipeline runs the publish and settle stages of a relay over fake
// lanes, fed with jobs directly.
type lanePipeline struct {
	r      *Relay
	store  *fakeStore
	jobs   chan publisher.Job[Ticket]
	cancel context.CancelFunc
	done   chan error
}

func startLanes(t *testing.T, lanes ...Lane) *lanePipeline {
	t.Helper()
	store := &fakeStore{j: &journal{}}
	r := mustNew(t, Config{CheckpointInterval: 5 * time.Millisecond, FlushInterval: 5 * time.Millisecond, Buffer: 64},
		nil, nil, lanes, nil, store, zap.NewNop())
	r.budget = newBudget(r.cfg.MaxInflightBytes)
	ctx, cancel := context.WithCancel(context.Background())
	p := &lanePipeline{r: r, store: store, jobs: make(chan publisher.Job[Ticket], 1024), cancel: cancel, done: make(chan error, 1)}
	start := binlog.Position{Flavor: binlog.FlavorMariaDB, File: "bin.000001", Pos: 4}
	go func() {
		g, gctx := errgroup.WithContext(ctx)
		results := r.publish(g, gctx, p.jobs)
		g.Go(func() error { return r.commitResults(gctx, ctx, start, 0, results) })
		p.done <- g.Wait()
	}()
	t.Cleanup(cancel)
	return p
}

func (p *lanePipeline) row(tb *outbox.Table, id int, key string) {
	row := &outbox.Row{Table: tb, ID: id, Values: map[string]any{"id": id, "aggregate_id": key}}
	p.jobs <- publisher.Job[Ticket]{Msg: &router.Message{Row: row, Exchange: "events", PartitionKey: key, Keyed: true},
		Tag: &inflightRow{row: row}, MustDeliver: true}
}

func (p *lanePipeline) commit(pos uint32) {
	p.jobs <- publisher.Job[Ticket]{Tag: commitTicket{commit: binlog.Commit{File: "bin.000001", Pos: pos}}}
}

// The checkpoint rule across lanes: a lane that holds a row keeps the
// checkpoint before that row's transaction, however far the other lanes
// got; once it lets go, the checkpoint moves to the last commit.
func TestCheckpointWaitsForEveryLane(t *testing.T) {
	tb := statuslessTable(t)
	held, free := &fakeLane{gate: make(chan struct{})}, &fakeLane{}
	slow, fast := keyOnLane(0, 2), keyOnLane(1, 2)
	p := startLanes(t, held, free)
	p.row(tb, 1, fast)
	p.commit(100) // tx 1: only the free lane's row
	p.row(tb, 2, fast)
	p.row(tb, 3, slow) // held
	p.commit(200)
	for i := 4; i < 40; i++ {
		p.row(tb, i, fast)
		p.commit(uint32(200 + i))
	}
	waitFor(t, 5*time.Second, func() bool { return p.store.last() == 100 }, "checkpoint at %d, want 100 (tx 1 settled)", p.store.last())
	waitFor(t, 5*time.Second, func() bool { return len(free.published()) == 38 }, "the free lane got %d rows, want 38", len(free.published()))
	holds(t, 30*time.Millisecond, func() error { // several checkpoint intervals: it must not move
		if got := p.store.last(); got != 100 {
			return fmt.Errorf("checkpoint moved to %d while a row of tx 2 was held on its lane", got)
		}
		return nil
	})
	if got := p.r.LaneInflight(); got[0]+got[1] != 37 {
		t.Errorf("in flight per lane %v, want 37 rows in all (the held one and the 36 behind it)", got)
	}
	close(held.gate)
	waitFor(t, 5*time.Second, func() bool { return p.store.last() == 239 }, "checkpoint at %d, want 239", p.store.last())
	if n := p.r.Stats.Published.Load(); n != 39 {
		t.Errorf("published %d, want 39", n)
	}
	close(p.jobs)
	if err := <-p.done; err != nil {
		t.Fatal(err)
	}
}

// Results come back in job order whatever the lanes' timing, and each lane
// gets its keys' rows in order, with Job.Key set.
func TestLanesMergeInJobOrder(t *testing.T) {
	tb := statuslessTable(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var mu sync.Mutex
	lanes := make([]Lane, 4)
	fakes := make([]*fakeLane, 4)
	for i := range lanes {
		fakes[i] = &fakeLane{delay: func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return time.Duration(rng.IntN(200)) * time.Microsecond
		}}
		lanes[i] = fakes[i]
	}
	r := mustNew(t, Config{Buffer: 16}, nil, nil, lanes, nil, nil, zap.NewNop())
	jobs := make(chan publisher.Job[Ticket])
	g, ctx := errgroup.WithContext(context.Background())
	results := r.publish(g, ctx, jobs)
	const rows = 2000
	g.Go(func() error {
		defer close(jobs)
		for i := 1; i <= rows; i++ {
			key := fmt.Sprintf("k%d", i%97)
			row := &outbox.Row{Table: tb, ID: i}
			jobs <- publisher.Job[Ticket]{Msg: &router.Message{Row: row, PartitionKey: key, Keyed: true}, Tag: &inflightRow{row: row}}
			if i%7 == 0 {
				// a marker no lane sees, naming the row it follows
				jobs <- publisher.Job[Ticket]{Tag: commitTicket{commit: binlog.Commit{Pos: uint32(i)}}}
			}
		}
		return nil
	})
	want := 1
	for res := range results {
		var id int
		switch tag := res.Job.Tag.(type) {
		case *inflightRow:
			id = tag.row.ID.(int)
		case commitTicket:
			id = -int(tag.commit.Pos)
		}
		switch {
		case id < 0 && -id != want-1:
			t.Fatalf("marker %d after row %d", -id, want-1)
		case id > 0 && id != want:
			t.Fatalf("row %d came back where row %d was due", id, want)
		case id > 0:
			want++
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if want != rows+1 {
		t.Fatalf("%d rows came back, want %d", want-1, rows)
	}
	for l, f := range fakes {
		last := map[uint64]int{}
		for _, j := range f.got {
			id := j.Msg.Row.ID.(int)
			if lane, key := LaneOf(j.Msg, 4); lane != l || j.Key != key {
				t.Fatalf("row %d on lane %d with key %#x, want lane %d key %#x", id, l, j.Key, lane, key)
			}
			if j.Msg == nil || id < last[j.Key] {
				t.Fatalf("lane %d got row %d after %d of the same key", l, id, last[j.Key])
			}
			last[j.Key] = id
		}
	}
}

// Strict ordering holds per lane, not per table: with the lanes keyed by
// table (route.partition_key "{schema}.{table}"), table A's missing
// exchange holds A's lane; table B, on the other lane, keeps publishing in
// commit order; the checkpoint stays before A's row; once the exchange
// exists A's rows go in order and the checkpoint reaches the last commit.
// What it does not give (docs/ordering.md, "Strict ordering per table"):
// B's rows wait unmarked behind A's, and past relay.buffer × relay.lanes
// rows (here 128, B sends 40) B would wait too; a table sharing A's lane
// waits at once.
func TestStrictHoldsOnlyTheLaneOfTheTableItHolds(t *testing.T) {
	tableOnLane := func(lane int) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("tenant_%d.outbox", i)
			if l, _ := LaneOf(&router.Message{PartitionKey: k, Keyed: true}, 2); l == lane {
				return k
			}
		}
	}
	keyA, keyB := tableOnLane(0), tableOnLane(1)
	tb := statuslessTable(t)
	var created atomic.Bool
	refuse := func(id string) error {
		if strings.HasPrefix(id, "a-") && !created.Load() {
			return fmt.Errorf("%w: %q (404 NOT_FOUND)", publisher.ErrNoExchange, "tenant_a")
		}
		return nil
	}
	laneA, laneB := &fakeLane{strict: true, refuse: refuse}, &fakeLane{strict: true, refuse: refuse}
	p := startLanes(t, laneA, laneB)
	send := func(prefix, key string, id int) {
		row := &outbox.Row{Table: tb, ID: id, Values: map[string]any{"id": id}}
		msg := &router.Message{Row: row, Exchange: "events", PartitionKey: key, Keyed: true}
		msg.Publishing.MessageId = fmt.Sprintf("%s-%d", prefix, id)
		p.jobs <- publisher.Job[Ticket]{Msg: msg, Tag: &inflightRow{row: row}, MustDeliver: true}
	}
	send("b", keyB, 1)
	p.commit(100)
	send("a", keyA, 2) // held: its exchange is missing
	p.commit(200)
	var wantB, wantA []string
	wantB = append(wantB, "b-1")
	wantA = append(wantA, "a-2")
	for i := 3; i < 43; i++ {
		if i%10 == 0 {
			send("a", keyA, i)
			wantA = append(wantA, fmt.Sprint("a-", i))
		} else {
			send("b", keyB, i)
			wantB = append(wantB, fmt.Sprint("b-", i))
		}
		p.commit(uint32(200 + i))
	}
	waitFor(t, 5*time.Second, func() bool { return slices.Equal(laneB.published(), wantB) },
		"table B published %v while A was held, want %v (in commit order)", laneB.published(), wantB)
	waitFor(t, 5*time.Second, func() bool { h, ok := laneA.Holding(); return ok && h.Attempts >= 3 }, "A's lane does not hold")
	// The recorder saves on its interval, which may not have come round yet:
	// the checkpoint reaches tx 100 (B's row, before the held one) and then
	// stays there.
	waitFor(t, 5*time.Second, func() bool { return p.store.last() == 100 }, "checkpoint never reached tx 100 (B's row) while a-2 (tx 200) was held")
	holds(t, 30*time.Millisecond, func() error {
		if got := p.store.last(); got != 100 {
			return fmt.Errorf("checkpoint at %d while a-2 (tx 200) was held, want 100", got)
		}
		if got := laneA.published(); slices.ContainsFunc(got, func(id string) bool { return id != "a-2" }) {
			return fmt.Errorf("A's lane published %v while a-2 was held, want only a-2, retried", got)
		}
		return nil
	})
	created.Store(true)
	waitFor(t, 5*time.Second, func() bool { return p.store.last() == 242 }, "checkpoint at %d after the exchange was created, want 242", p.store.last())
	var gotA []string
	for _, id := range laneA.published() {
		if len(gotA) == 0 || gotA[len(gotA)-1] != id {
			gotA = append(gotA, id) // retries of a-2 count once
		}
	}
	if !slices.Equal(gotA, wantA) {
		t.Errorf("table A published %v, want %v", gotA, wantA)
	}
	if n := p.r.Stats.Published.Load(); n != 42 {
		t.Errorf("published %d, want 42", n)
	}
	close(p.jobs)
	if err := <-p.done; err != nil {
		t.Fatal(err)
	}
}

package relay

// The fakes every test of the package shares: a scripted binlog reader, a
// publisher lane the test steers, and a marker and a checkpoint store that
// write into one journal, so a test reads back in which order rows were
// marked and positions saved.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/streamlane"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// The binary wires the real stages in through the same interfaces.
var (
	_ Reader          = (*binlog.Reader)(nil)
	_ Lane            = publisher.Stream[Ticket]{}
	_ Marker          = (*rowstatus.Writer)(nil)
	_ CheckpointStore = checkpoint.Store(nil)

	// Both kinds of lane ask the guard before each message they write.
	_ guardedLane = publisher.Stream[Ticket]{}
	_ guardedLane = streamlane.Restarting[Ticket]{}

	_ Reader          = (*fakeReader)(nil)
	_ Lane            = (*fakeLane)(nil)
	_ Marker          = (*fakeMarker)(nil)
	_ CheckpointStore = (*fakeStore)(nil)
)

// fakeReader plays a script of binlog events, then waits for the stop as a
// live stream does. With pauseAt > 0 it stops before that event, closes
// paused and waits for the stop; then, as binlog.Reader does, it finishes
// the transaction in progress (up to its commit) before returning, or with
// cut returns at once (a stream that broke mid-transaction).
type fakeReader struct {
	events  []binlog.Event
	pauseAt int
	cut     bool
	paused  chan struct{}
}

func (f *fakeReader) Run(ctx context.Context, _ binlog.Position, out chan<- binlog.Event) error {
	for i, ev := range f.events {
		if i == f.pauseAt && f.pauseAt > 0 {
			close(f.paused)
			<-ctx.Done()
			if f.cut {
				return nil
			}
			f.finishTx(i, out)
			return nil
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

// finishTx sends the events from i up to the next commit: the stop came
// inside a transaction and the reader ends at its boundary.
func (f *fakeReader) finishTx(i int, out chan<- binlog.Event) {
	for _, ev := range f.events[i:] {
		out <- ev
		if ev.Kind == binlog.KindCommit {
			return
		}
	}
}

func (f *fakeReader) Connected() bool { return true }

// fakeLane is a publisher the test steers. It takes the jobs it is given in
// order and returns their results in the same order. While gate is open
// (not closed) it holds each result until the gate closes; delay spaces the
// results. refuse, when set, is the broker's answer to a message (by id): a
// refused message fails, or in strict mode holds the lane and is retried
// with doubling backoff, reported by Holding, until refuse lets it through.
type fakeLane struct {
	gate   chan struct{}
	delay  func() time.Duration
	strict bool
	refuse func(messageID string) error

	confirmed atomic.Int64 // results handed back
	mu        sync.Mutex
	got       []publisher.Job[Ticket]
	attempts  []string // message ids, one per publish, retries included
	hold      *publisher.Hold
}

// strictRetryMin and strictRetryMax bound the fake's backoff.
const strictRetryMin, strictRetryMax = 2 * time.Millisecond, 16 * time.Millisecond

func (f *fakeLane) Run(ctx context.Context, in <-chan publisher.Job[Ticket], out chan<- publisher.Result[Ticket]) error {
	for job := range in {
		f.mu.Lock()
		f.got = append(f.got, job)
		f.mu.Unlock()
		if f.gate != nil {
			select {
			case <-f.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if f.delay != nil {
			time.Sleep(f.delay())
		}
		res, err := f.publish(ctx, job)
		if err != nil {
			return err
		}
		select {
		case out <- res:
			f.confirmed.Add(1)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// publish offers one message to the fake broker until it is settled: a
// job without a message (a commit) passes through.
func (f *fakeLane) publish(ctx context.Context, job publisher.Job[Ticket]) (publisher.Result[Ticket], error) {
	if job.Msg == nil {
		return publisher.Result[Ticket]{Job: job}, nil
	}
	id := job.Msg.Publishing.MessageId
	since, wait := time.Now(), backoff.Backoff{Initial: strictRetryMin, Max: strictRetryMax}
	for attempt := 1; ; attempt++ {
		f.mu.Lock()
		f.attempts = append(f.attempts, id)
		f.mu.Unlock()
		var err error
		if f.refuse != nil {
			err = f.refuse(id)
		}
		switch {
		case err == nil:
			f.setHold(nil)
			return publisher.Result[Ticket]{Job: job}, nil
		case !f.strict:
			return publisher.Result[Ticket]{Job: job, Err: err}, nil
		}
		f.setHold(&publisher.Hold{MessageID: id, Exchange: job.Msg.Exchange, Reason: err.Error(), Since: since, Attempts: attempt})
		if err := wait.Wait(ctx); err != nil {
			return publisher.Result[Ticket]{}, err
		}
	}
}

func (f *fakeLane) setHold(h *publisher.Hold) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = h
}

func (f *fakeLane) Connected() bool { return true }

func (f *fakeLane) Holding() (publisher.Hold, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold == nil {
		return publisher.Hold{}, false
	}
	return *f.hold, true
}

// published returns the message ids offered to the broker, in order (a
// refused message once per attempt).
func (f *fakeLane) published() []string {
	f.mu.Lock()
	ids := slices.Clone(f.attempts)
	f.mu.Unlock()
	return ids
}

// journal is what the fake marker and store wrote, in order: a user's view
// of the outbox table and the checkpoint.
type journal struct {
	mu      sync.Mutex
	entries []entry
}

// entry is one row marked SENT, one row sent to the retry path, or one
// checkpoint saved.
type entry struct {
	kind string // "sent", "retry" or "checkpoint"
	id   any
	pos  uint32
}

func (j *journal) add(e ...entry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, e...)
}

func (j *journal) all() []entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]entry(nil), j.entries...)
}

// ids returns the ids of the rows of one kind, in the order written.
func (j *journal) ids(kind string) []any {
	var out []any
	for _, e := range j.all() {
		if e.kind == kind {
			out = append(out, e.id)
		}
	}
	return out
}

// checkpoints returns the positions saved, in order.
func (j *journal) checkpoints() []uint32 {
	var out []uint32
	for _, e := range j.all() {
		if e.kind == "checkpoint" {
			out = append(out, e.pos)
		}
	}
	return out
}

// last is the last position saved (0 before any).
func (j *journal) last() uint32 {
	cps := j.checkpoints()
	if len(cps) == 0 {
		return 0
	}
	return cps[len(cps)-1]
}

// fakeMarker takes every status write.
type fakeMarker struct{ j *journal }

func (m *fakeMarker) MarkSent(_ context.Context, _ *outbox.Table, marks rowstatus.Marks) (int64, error) {
	ids := marks.IDs
	for _, id := range ids {
		m.j.add(entry{kind: "sent", id: id})
	}
	return int64(len(ids)), nil
}

func (m *fakeMarker) MarkRetryMany(_ context.Context, _ *outbox.Table, _ rowstatus.Attempt, rows rowstatus.Marks) (rowstatus.Outcome, int64, error) {
	ids := rows.IDs
	for _, id := range ids {
		m.j.add(entry{kind: "retry", id: id})
	}
	return rowstatus.Retrying, int64(len(ids)), nil
}

// fakeStore records every checkpoint saved.
type fakeStore struct{ j *journal }

func (s *fakeStore) Save(_ context.Context, c checkpoint.Checkpoint) error {
	s.j.add(entry{kind: "checkpoint", pos: c.Pos})
	return nil
}

func (s *fakeStore) last() uint32 { return s.j.last() }

// statuslessTable has no status column: settling a row writes nothing.
func statuslessTable(t *testing.T) *outbox.Table {
	t.Helper()
	tb := &outbox.Table{Schema: "shop", Name: "events", Columns: outbox.Columns{ID: "id", Payload: "payload"},
		Route: outbox.Route{Exchange: "events", PartitionKey: "aggregate_id"}}
	if err := tb.Validate("tables[0]"); err != nil {
		t.Fatal(err)
	}
	return tb
}

// presetTable is a preset's table in schema shop, partitioned by the
// partitionKey column (the preset's own when empty).
func presetTable(t *testing.T, name, partitionKey string) *outbox.Table {
	t.Helper()
	p, err := outbox.Preset(name)
	if err == nil {
		p.Schema = "shop"
		if partitionKey != "" {
			p.Route.PartitionKey = partitionKey
		}
		err = p.Validate("tables[0]")
	}
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// markedTable is the producer-message preset, partitioned by routing key:
// each settled row is marked SENT or sent to the retry path.
func markedTable(t *testing.T) *outbox.Table {
	return presetTable(t, "producer-message", "routing_key")
}

// markedRow is a pending row of markedTable: message id m-<id>, to the
// orders exchange with key as routing and partition key.
func markedRow(tb *outbox.Table, id, retries int, key string) *outbox.Row {
	return &outbox.Row{Table: tb, ID: id, Values: map[string]any{"id": id, "message_id": fmt.Sprint("m-", id),
		"exchange": "orders", "routing_key": key, "content": []byte(`{}`), "status": "PENDING",
		"retry_count": retries, "max_retry_count": 5}}
}

// debeziumTable has no status column: its rows must be delivered.
func debeziumTable(t *testing.T) *outbox.Table { return presetTable(t, "debezium", "") }

// testRelay is a relay with a router over tb and an idle publisher, enough
// for the route and commit stages.
func testRelay(t *testing.T, tb *outbox.Table, dlx string) (*Relay, *observer.ObservedLogs) {
	t.Helper()
	rt, err := router.New([]*outbox.Table{tb}, router.WithAppID("relay-test"))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	pub, err := publisher.New(publisher.Config{URL: "amqp://127.0.0.1:1/"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	r := mustNew(t, Config{DeadLetterExchange: dlx, MaxInflightBytes: 1 << 20}, nil, rt, []Lane{publisher.Stream[Ticket]{Publisher: pub}}, nil, nil, zap.New(core))
	r.budget = newBudget(r.cfg.MaxInflightBytes)
	return r, logs
}

// keyOnLane returns a partition key that hashes to lane of n.
func keyOnLane(lane, n int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("key-%d", i)
		if l, _ := LaneOf(&router.Message{PartitionKey: k, Keyed: true}, n); l == lane {
			return k
		}
	}
}

// waitFor polls cond until it holds, failing the test at the deadline.
func waitFor(t *testing.T, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// holds checks that check finds nothing wrong for d: a state the pipeline
// must not leave (a checkpoint that must not move) is watched over several
// of its flush and checkpoint intervals.
func holds(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// mustNew builds a relay over the fakes, failing the test on a config New
// refuses.
func mustNew(t *testing.T, cfg Config, reader Reader, rt *router.Router, lanes []Lane, marker Marker, store CheckpointStore, log *zap.Logger) *Relay {
	t.Helper()
	r, err := New(cfg, reader, rt, lanes, marker, store, log)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

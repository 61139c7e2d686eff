package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// gatedMarker is the fake marker with its SENT marks held until gate is
// closed: a slow primary.
type gatedMarker struct {
	fakeMarker
	gate chan struct{}
}

func (m *gatedMarker) MarkSent(ctx context.Context, t *outbox.Table, marks rowstatus.Marks) (int64, error) {
	select {
	case <-m.gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return m.fakeMarker.MarkSent(ctx, t, marks)
}

// While the primary does not take the marks, no more than relay.max_unmarked
// rows are taken as confirmed and left unmarked (what a SIGKILL would
// publish again), and Unmarked (binlog_relay_unmarked_rows) says how many;
// once it does, every row is marked, the checkpoint reaches the last
// commit and Unmarked is back to 0.
func TestConfirmedRowsWaitUnderMaxUnmarked(t *testing.T) {
	const ceiling = 7
	var marker *gatedMarker
	r, p, txs := runOneRowTxs(t, 60, Config{BatchSize: 4, MaxUnmarked: ceiling, FlushInterval: 2 * time.Millisecond, CheckpointInterval: 2 * time.Millisecond},
		func(j *journal) Marker {
			marker = &gatedMarker{fakeMarker: fakeMarker{j: j}, gate: make(chan struct{})}
			return marker
		})
	waitFor(t, 5*time.Second, func() bool { return r.Stats.Published.Load() == ceiling },
		"%d rows taken as confirmed, want the ceiling %d", r.Stats.Published.Load(), ceiling)
	holds(t, 30*time.Millisecond, func() error {
		if n := r.Stats.Published.Load(); n > ceiling {
			return fmt.Errorf("%d rows confirmed and unmarked; relay.max_unmarked is %d", n, ceiling)
		}
		if n := r.Unmarked(); n != ceiling {
			return fmt.Errorf("Unmarked says %d with %d rows confirmed and none marked", n, ceiling)
		}
		return nil
	})
	close(marker.gate)
	waitFor(t, 5*time.Second, func() bool { return r.Stats.Marked.Load() == 60 && r.Unmarked() == 0 },
		"Unmarked says %d after %d of 60 rows were marked, want 0 after all", r.Unmarked(), r.Stats.Marked.Load())
	var all []any
	for i := 1; i <= 60; i++ {
		all = append(all, i)
	}
	p.finish(t, 6000, all, txs)
}

// Rows confirmed and waiting for a batch that is not due yet (the batch
// target and the flush interval both far off) count in Unmarked; the
// graceful stop marks them and Unmarked is 0 again.
func TestUnmarkedCountsRowsWaitingForABatch(t *testing.T) {
	r, p, _ := runOneRowTxs(t, 5, Config{BatchSize: 100, MaxUnmarked: 1000, FlushInterval: time.Hour, CheckpointInterval: time.Hour},
		func(j *journal) Marker { return &fakeMarker{j: j} })
	waitFor(t, 5*time.Second, func() bool { return r.Stats.Published.Load() == 5 }, "%d of 5 rows confirmed", r.Stats.Published.Load())
	holds(t, 30*time.Millisecond, func() error {
		if n, m := r.Unmarked(), r.Stats.Marked.Load(); n != 5 || m != 0 {
			return fmt.Errorf("Unmarked says %d with 5 rows confirmed and %d marked, want 5 and 0", n, m)
		}
		return nil
	})
	if err := p.stop(t); err != nil {
		t.Fatalf("a graceful stop returned %v", err)
	}
	if n, m := r.Unmarked(), r.Stats.Marked.Load(); n != 0 || m != 5 {
		t.Fatalf("after the graceful stop Unmarked says %d with %d rows marked, want 0 and 5", n, m)
	}
}

// runOneRowTxs runs a relay over n transactions of one row each (ids 1 to
// n) with cfg and the marker newMarker builds on the run's journal; the
// run is stopped at the test's end.
func runOneRowTxs(t *testing.T, n int, cfg Config, newMarker func(*journal) Marker) (*Relay, *pipeline, []tx) {
	t.Helper()
	tb := markedTable(t)
	var txs []tx
	for i := 1; i <= n; i++ {
		txs = append(txs, tx{uint32(100 * i), []int{i}})
	}
	rt, err := router.New([]*outbox.Table{tb}, router.WithAppID("relay-test"))
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{}
	cfg.Buffer, cfg.Server = 64, func() string { return "test" }
	r := mustNew(t, cfg, &fakeReader{events: script(tb, func(int) string { return "k" }, txs...)}, rt, []Lane{&fakeLane{}},
		newMarker(j), &fakeStore{j: j}, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{r: r, j: j, cancel: cancel, done: make(chan error, 1)}
	go func() {
		p.done <- r.Run(ctx, binlog.Position{Flavor: binlog.FlavorMariaDB, File: "bin.000001", Pos: 4})
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return r, p, txs
}

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
// publish again); once it does, every row is marked and the checkpoint
// reaches the last commit.
func TestConfirmedRowsWaitUnderMaxUnmarked(t *testing.T) {
	tb := markedTable(t)
	var txs []tx
	for i := 1; i <= 60; i++ {
		txs = append(txs, tx{uint32(100 * i), []int{i}})
	}
	rt, err := router.New([]*outbox.Table{tb}, router.WithAppID("relay-test"))
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{}
	marker := &gatedMarker{fakeMarker: fakeMarker{j: j}, gate: make(chan struct{})}
	const ceiling = 7
	r := mustNew(t, Config{BatchSize: 4, MaxUnmarked: ceiling, FlushInterval: 2 * time.Millisecond, CheckpointInterval: 2 * time.Millisecond,
		Buffer: 64, Server: func() string { return "test" }},
		&fakeReader{events: script(tb, func(int) string { return "k" }, txs...)}, rt, []Lane{&fakeLane{}}, marker, &fakeStore{j: j}, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{r: r, j: j, cancel: cancel, done: make(chan error, 1)}
	go func() {
		p.done <- r.Run(ctx, binlog.Position{Flavor: binlog.FlavorMariaDB, File: "bin.000001", Pos: 4})
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	waitFor(t, 5*time.Second, func() bool { return r.Stats.Published.Load() == ceiling },
		"%d rows taken as confirmed, want the ceiling %d", r.Stats.Published.Load(), ceiling)
	holds(t, 30*time.Millisecond, func() error {
		if n := r.Stats.Published.Load(); n > ceiling {
			return fmt.Errorf("%d rows confirmed and unmarked; relay.max_unmarked is %d", n, ceiling)
		}
		return nil
	})
	close(marker.gate)
	var all []any
	for i := 1; i <= 60; i++ {
		all = append(all, i)
	}
	p.finish(t, 6000, all, txs)
}

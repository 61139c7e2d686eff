package relay

import (
	"context"
	"fmt"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Consecutive identical failures (same table, exchange, reason and retry
// counts) become one group, written with one statement; anything different
// starts a new group, so the order of the writes follows the rows.
func TestFailuresAreGroupedInOrder(t *testing.T) {
	p, err := outbox.Preset("producer-message")
	if err != nil {
		t.Fatal(err)
	}
	p.Schema = "shop"
	tb := &p
	r, _ := testRelay(t, debeziumTable(t), "")
	// One batch of up to 1,000 rows: the 503 failures stay in it.
	s := &committer{r: r, stop: context.Background(), pending: map[*outbox.Table]*rowstatus.Marks{}, batches: make(chan batch, 4),
		cadence: rowstatus.NewCadence(rowstatus.Cadence{MinBatch: 1000, MaxBatch: 1000, MaxUnmarked: 1024})}
	gone := fmt.Errorf("%w: %q (404 NOT_FOUND)", publisher.ErrNoExchange, "gone")
	row := func(id int, retries int) *outbox.Row {
		return &outbox.Row{Table: tb, ID: id, Values: map[string]any{"id": id, "message_id": fmt.Sprint("m-", id), "retry_count": retries, "max_retry_count": 5}}
	}
	ctx := context.Background()
	for i := range 500 {
		if err := s.fail(ctx, row(i, 0), "gone", gone); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.fail(ctx, row(500, 2), "gone", gone)                                                    // another retry count
	_ = s.fail(ctx, row(501, 0), "orders", fmt.Errorf("%w: 312 NO_ROUTE", publisher.ErrReturned)) // another reason
	_ = s.fail(ctx, row(502, 0), "gone", gone)
	if len(s.fails) != 4 {
		t.Fatalf("%d groups, want 4", len(s.fails))
	}
	for i, want := range []struct {
		n     int
		first string
		kind  string
	}{{500, "m-0", "no_exchange"}, {1, "m-500", "no_exchange"}, {1, "m-501", "returned"}, {1, "m-502", "no_exchange"}} {
		g := s.fails[i]
		if len(g.rows.IDs) != want.n || g.first != want.first || g.kind != want.kind {
			t.Fatalf("group %d: %d rows from %s (%s), want %d from %s (%s)", i, len(g.rows.IDs), g.first, g.kind, want.n, want.first, want.kind)
		}
	}
	if s.count != 503 || r.Stats.Failed.Load() != 503 {
		t.Fatalf("count %d, failed %d; want 503", s.count, r.Stats.Failed.Load())
	}
}

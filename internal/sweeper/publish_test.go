package sweeper

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// fakePublisher confirms every job in order, failing the message ids in fail.
type fakePublisher struct {
	fail      map[string]error
	published []string
}

func (f *fakePublisher) Connected() bool { return true }

func (f *fakePublisher) Run(ctx context.Context, in <-chan publisher.Job[*Claimed], out chan<- publisher.Result[*Claimed]) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case j := <-in:
			id := j.Msg.Publishing.MessageId
			f.published = append(f.published, id)
			select {
			case out <- publisher.Result[*Claimed]{Job: j, Err: f.fail[id]}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// A batch larger than the channels between the sweeper and the publisher
// comes back whole and in order; unroutable rows never reach the broker;
// returned and nacked rows are failures with the broker's reason.
func TestPublishSortsOutcomes(t *testing.T) {
	tb := table(t, "producer-message", nil)
	rt, err := router.New([]*outbox.Table{tb}, router.WithAppID("test"))
	if err != nil {
		t.Fatal(err)
	}
	returned := fmt.Errorf("%w: 312 NO_ROUTE", publisher.ErrReturned)
	fake := &fakePublisher{fail: map[string]error{"m-0003": returned, "m-0007": publisher.ErrNacked}}
	cfg := Config{BatchSize: 4}
	s, err := New(cfg, []*outbox.Table{tb}, nil, nil, fake, rt, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = fake.Run(ctx, s.jobs, s.results) }()

	var rows []*Claimed
	for i := range 20 {
		exchange := any("ex")
		if i == 5 {
			exchange = nil // a NULL route column
		}
		rows = append(rows, &Claimed{row: &outbox.Row{Table: tb, ID: int64(i), Values: map[string]any{
			"id": int64(i), "message_id": fmt.Sprintf("m-%04d", i), "exchange": exchange, "routing_key": "rk", "content": []byte("{}"),
		}}})
	}
	sent, failed, err := s.publish(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 17 || len(failed) != 3 {
		t.Fatalf("%d sent, %d failed; want 17 and 3", len(sent), len(failed))
	}
	for i := 1; i < len(sent); i++ {
		if sent[i].row.ID.(int64) <= sent[i-1].row.ID.(int64) {
			t.Fatalf("sent out of order: %v after %v", sent[i].row.ID, sent[i-1].row.ID)
		}
	}
	want := map[int64]error{5: router.ErrNoRoute, 3: publisher.ErrReturned, 7: publisher.ErrNacked}
	for _, f := range failed {
		id := f.c.row.ID.(int64)
		if !errors.Is(f.err, want[id]) {
			t.Errorf("row %d failed with %v, want %v", id, f.err, want[id])
		}
	}
	if len(fake.published) != 19 {
		t.Errorf("%d published; the unroutable row must not be", len(fake.published))
	}
}

package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// acquired runs acquire in a goroutine and reports its result.
func acquired(ctx context.Context, b *budget, w int64) <-chan error {
	done := make(chan error, 1)
	go func() { _, err := b.acquire(ctx, w); done <- err }()
	return done
}

func wantBlocked(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s did not wait for the budget (err %v)", what, err)
	case <-time.After(50 * time.Millisecond):
	}
}

func wantAcquired(t *testing.T, done <-chan error, what string) {
	t.Helper()
	if err := testenv.Receive(t, done, 5*time.Second, what+" still waits for the budget"); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Rows wait while the budget is used up and go on as rows ahead settle; a
// row larger than the whole budget waits for the rest to settle, then passes
// alone, and the rows behind it wait until it is settled.
func TestBudgetBackpressureAndOversizedRow(t *testing.T) {
	ctx := context.Background()
	b := newBudget(1000)
	w1, err := b.acquire(ctx, 600)
	if err != nil || w1 != 600 {
		t.Fatalf("first row: took %d, %v", w1, err)
	}
	second := acquired(ctx, b, 600)
	wantBlocked(t, second, "a row over the remaining budget")
	b.release(w1)
	wantAcquired(t, second, "the row after the first settled")

	huge := make(chan int64, 1)
	go func() { w, _ := b.acquire(ctx, 50_000); huge <- w }()
	select {
	case w := <-huge:
		t.Fatalf("the oversized row passed (took %d) while another row was in flight", w)
	case <-time.After(50 * time.Millisecond):
	}
	b.release(600)
	wHuge := testenv.Receive(t, huge, 5*time.Second, "a row larger than the whole budget never passed: deadlock")
	if wHuge != 1000 {
		t.Fatalf("the oversized row took %d, want the whole budget 1000", wHuge)
	}
	small := acquired(ctx, b, 1)
	wantBlocked(t, small, "a row behind the oversized one")
	b.release(wHuge)
	wantAcquired(t, small, "the row after the oversized one settled")
}

// A waiting row gives up when the pipeline stops.
func TestBudgetWaitEndsWithContext(t *testing.T) {
	b := newBudget(10)
	if _, err := b.acquire(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := acquired(ctx, b, 5)
	cancel()
	if err := testenv.Receive(t, done, 5*time.Second, "acquire did not return after cancel"); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// A row's weight counts its values and the message body built from them.
func TestRowWeightCountsValuesAndBody(t *testing.T) {
	payload := make([]byte, 1<<20)
	row := &outbox.Row{Values: map[string]any{"id": uint64(1), "payload": payload, "type": "order.created"}}
	msg := &router.Message{Exchange: "orders", RoutingKey: "order.created",
		Publishing: amqp.Publishing{MessageId: "m-1", Body: payload}}
	w := rowWeight(row, msg)
	if w < 2<<20 || w > 2<<20+4096 {
		t.Fatalf("weight %d for a 1 MiB payload held as a value and a body, want about 2 MiB", w)
	}
	if w0 := rowWeight(&outbox.Row{Values: map[string]any{}}, nil); w0 < rowOverhead {
		t.Fatalf("an empty row weighs %d, want at least the overhead %d", w0, rowOverhead)
	}
}

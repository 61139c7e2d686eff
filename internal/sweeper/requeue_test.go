package sweeper

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Requeue meets each FAILED row once, though the rows it puts back fail
// again before it is done (the binlog path publishes a re-queue at once,
// and a permanent failure records FAILED again within its --since
// window). Its batches took any 1,000 matching rows, so they met the
// rows failed again, and with more than 1,000 failing again that fast
// they never came back short: it went on, publishing them again and
// again, until stopped.
func TestRequeueMeetsEachRowOnceThoughRowsFailAgain(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewPrimaryDB(t, "schema/producer_message.sql")
	const rows = 2500
	values := make([]string, rows)
	for i := range values {
		values[i] = fmt.Sprintf("('rq-%d', 'ex', 'rk', '{}', 'FAILED', NOW(3) - INTERVAL 10 MINUTE, NOW(3) - INTERVAL 10 MINUTE)", i)
	}
	db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content, status, create_time, update_time) VALUES "+
		strings.Join(values, ", "))
	tb := table(t, "producer-message", func(tb *outbox.Table) { tb.Schema = db.Name })

	// The binlog path, failing every re-queued row for good at once.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			_, _ = db.Primary.ExecContext(ctx, "UPDATE producer_message SET status = 'FAILED', update_time = NOW(3) WHERE status = 'PENDING'")
		}
	}()
	n, err := Requeue(ctx, db.Primary, tb, RequeueFilter{Since: time.Hour})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("requeue stopped by its deadline after %d rows: %v", n, err)
	}
	if n != rows {
		t.Fatalf("requeue moved %d rows, want each of the %d FAILED rows once", n, rows)
	}
}

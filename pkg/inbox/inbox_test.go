package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Test 1: the same message delivered ten times has its effect once.
func TestSameMessageTenTimesTakesEffectOnce(t *testing.T) {
	cases := []struct {
		name  string
		redis string // "", "up" or "down"
	}{
		{"database only", ""},
		{"redis fast path", "up"},
		{"redis unreachable", "down"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newParallelTestEnv(t)
			cfg := e.config()
			var opts []Option
			var client *redis.Client
			switch tc.redis {
			case "up":
				client, cfg.DedupKeyPrefix = testenv.NewRedis(t, "inbox_test")
				opts = append(opts, WithDedup(NewRedisDedup(client)))
			case "down":
				// Nothing listens on port 1: every Redis call fails; only speed may suffer.
				down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
				t.Cleanup(func() { _ = down.Close() })
				opts = append(opts, WithDedup(NewRedisDedup(down)))
			}
			var calls atomic.Int64
			rc := e.startConsumer(cfg, deductHandler(&calls, nil), opts...)
			for i := 0; i < 10; i++ {
				e.publish("order-1", itemBody(3))
			}
			rc.waitCounters(t, "10 deliveries ACKed", func(s Snapshot) bool { return s.Total() == 10 })
			rc.stop(t)

			s := rc.counters.Snapshot()
			if s.Processed != 1 || s.Duplicates != 9 || s.Retries != 0 || s.Failed != 0 {
				t.Errorf("outcomes = %+v, want 1 processed and 9 duplicates", s)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
			e.expectStock(t, initialStock-3, " (deducted once)")
			e.expectStockLog(t, 1)
			rows := e.rows()
			if len(rows) != 1 || rows[0].Status != StatusSuccess || rows[0].MessageID != "order-1" {
				t.Fatalf("inbox rows = %+v, want one SUCCESS row for order-1", rows)
			}
			if string(rows[0].Content) != string(itemBody(3)) {
				t.Errorf("stored content = %q, want the body", rows[0].Content)
			}
			e.expectQueueDepth(t, 0, " after the run")
			if client != nil {
				key := cfg.DedupKeyPrefix + cfg.ConsumerName + ":order-1"
				if client.Exists(context.Background(), key).Val() != 1 {
					t.Errorf("redis marker %s was not written", key)
				}
			}
		})
	}
}

// Test 2: one message consumed by two consumers on two connections at the same time.
func TestConcurrentConsumersTakeEffectOnce(t *testing.T) {
	e := newParallelTestEnv(t)
	// Consumer A's first handler call blocks until released, holding the new row's
	// unique key inside its transaction.
	held := e.holdFirstCall()
	a := e.startConsumer(held.cfg, held.h)
	e.publish("order-7", itemBody(5))
	<-held.entered

	// A holds its only prefetch slot, so the broker must hand the copy to B, whose
	// INSERT then waits on A's row lock.
	b := e.startConsumer(held.cfg, held.h)
	e.publish("order-7", itemBody(5))
	// B's INSERT cannot finish while A's transaction holds the key, so seeing it in the
	// process list means it is waiting on A's lock. (MariaDB's INNODB_TRX does not list
	// a transaction waiting on its first row lock, so the process list is the witness.)
	testenv.WaitFor(t, 20*time.Second, "B's inbox insert waiting on A's lock", func() (bool, string) {
		n := e.count(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND INFO LIKE 'INSERT INTO _consumer_message_%order-7%'`)
		return n == 1, fmt.Sprintf("%d inbox inserts of order-7 running", n)
	})
	close(held.release)
	testenv.WaitFor(t, 20*time.Second, "both copies ACKed", func() (bool, string) {
		sa, sb := a.counters.Snapshot(), b.counters.Snapshot()
		return sa.Total()+sb.Total() == 2, fmt.Sprintf("A %+v, B %+v", sa, sb)
	})
	a.stop(t)
	b.stop(t)

	if sa, sb := a.counters.Snapshot(), b.counters.Snapshot(); sa.Processed != 1 || sb.Duplicates != 1 {
		t.Errorf("A %+v, B %+v; want A processed 1, B duplicate 1", sa, sb)
	}
	if n := held.calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	e.expectStock(t, initialStock-5, "")
	e.expectQueueDepth(t, 0, "")
}

// Test 2, in bulk: many messages, each published twice, raced by two consumers.
func TestConcurrentConsumersBulk(t *testing.T) {
	e := newParallelTestEnv(t)
	e.exec(`UPDATE stock SET quantity = 100000`)
	const n = 300
	var msgs []amqp.Publishing
	for i := 0; i < n; i++ {
		m := amqp.Publishing{MessageId: fmt.Sprintf("bulk-%d", i), Body: itemBody(1)}
		msgs = append(msgs, m, m) // adjacent copies land on different consumers
	}
	var calls atomic.Int64
	cfg := e.config()
	a := e.startConsumer(cfg, deductHandler(&calls, nil))
	b := e.startConsumer(cfg, deductHandler(&calls, nil))
	e.publishMany(msgs)
	testenv.WaitFor(t, 60*time.Second, "all copies ACKed", func() (bool, string) {
		sa, sb := a.counters.Snapshot(), b.counters.Snapshot()
		return sa.Total()+sb.Total() == 2*n, fmt.Sprintf("A %+v, B %+v", sa, sb)
	})
	a.stop(t)
	b.stop(t)
	sa, sb := a.counters.Snapshot(), b.counters.Snapshot()
	if sa.Processed+sb.Processed != n || sa.Duplicates+sb.Duplicates != n {
		t.Errorf("A %+v, B %+v; want %d processed and %d duplicates in total", sa, sb, n, n)
	}
	if sa.Processed == 0 || sb.Processed == 0 {
		t.Errorf("one consumer processed nothing (A %+v, B %+v): the race was not exercised", sa, sb)
	}
	e.expectStock(t, 100000-n, "")
	e.expectStockLog(t, n)
	if got := e.count(`SELECT COUNT(*) FROM consumer_message WHERE status = 'SUCCESS'`); got != n {
		t.Errorf("SUCCESS rows = %d, want %d", got, n)
	}
}

// Test 3: the handler fails twice, then succeeds on the second retry.
func TestHandlerFailsTwiceThenSucceeds(t *testing.T) {
	e := newParallelTestEnv(t)
	cfg := e.config()
	cfg.MaxRetries = 5
	var calls atomic.Int64
	var sawStatus []string
	h := deductHandler(&calls, func(call int64) error {
		if call <= 2 {
			return fmt.Errorf("warehouse service unavailable (call %d)", call)
		}
		return nil
	})
	// Record the row's status as each attempt starts, from outside the transaction.
	observed := func(ctx context.Context, tx *sql.Tx, m Message) error {
		var status string
		_ = e.db.QueryRow(`SELECT status FROM consumer_message WHERE message_id = ?`, m.ID).Scan(&status)
		sawStatus = append(sawStatus, fmt.Sprintf("%s/retry=%d", status, m.RetryCount))
		return h(ctx, tx, m)
	}
	rc := e.startConsumer(cfg, observed)
	e.publish("order-3", itemBody(4))
	e.waitOneRow(t, "order-3", StatusSuccess)
	rc.stop(t)

	rows := e.rows()
	if r := rows[0]; r.RetryCount != 2 || !strings.Contains(r.ErrorMsg, "(call 2)") {
		t.Errorf("row = %+v, want retry_count 2 and the last error kept", r)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("handler ran %d times, want 3", n)
	}
	// First attempt: no row yet (the insert is uncommitted). Both retries: RETRYING.
	want := "/retry=0 RETRYING/retry=1 RETRYING/retry=2"
	if got := strings.Join(sawStatus, " "); got != want {
		t.Errorf("attempts saw %q, want %q", got, want)
	}
	if s := rc.counters.Snapshot(); s.Retries != 2 || s.Processed != 1 || s.Failed != 0 {
		t.Errorf("outcomes = %+v, want 2 retries then 1 processed", s)
	}
	e.expectStock(t, initialStock-4, ": failed attempts must roll back")
	e.expectStockLog(t, 1)
	e.expectQueueDepth(t, 0, "")
}

// Test 4: the handler always fails: FAILED after MaxRetries with the last error.
func TestHandlerAlwaysFailsEndsFailed(t *testing.T) {
	e := newParallelTestEnv(t)
	cfg := e.config()
	cfg.MaxRetries = 2
	var calls atomic.Int64
	rc := e.startConsumer(cfg, deductHandler(&calls, func(call int64) error {
		return fmt.Errorf("attempt %d: warehouse rejects the request", call)
	}))
	e.publish("order-4", itemBody(2))
	e.waitOneRow(t, "order-4", StatusFailed)
	rc.stop(t)

	r := e.rows()[0]
	if r.RetryCount != 2 {
		t.Errorf("retry_count = %d, want 2", r.RetryCount)
	}
	if r.ErrorMsg != "attempt 3: warehouse rejects the request" {
		t.Errorf("error_msg = %q, want the last attempt's error", r.ErrorMsg)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("handler ran %d times, want 1 + MaxRetries = 3", n)
	}
	if s := rc.counters.Snapshot(); s.Retries != 2 || s.Failed != 1 || s.Processed != 0 {
		t.Errorf("outcomes = %+v, want 2 retries and 1 failed", s)
	}
	e.expectStock(t, initialStock, ": nothing may stick")
	e.expectQueueDepth(t, 0, "")
}

// Test 6: a message without id and one with a malformed body are FAILED with their
// reasons and ACKed; the consumer goes on.
func TestUnusableMessagesFailedAndConsumingContinues(t *testing.T) {
	e := newParallelTestEnv(t)
	var calls atomic.Int64
	rc := e.startConsumer(e.config(), deductHandler(&calls, nil))
	e.publishMany([]amqp.Publishing{
		{MessageId: "", Body: itemBody(1)},
		{MessageId: "order-bad", Body: []byte("{not json\xff")},
		{MessageId: strings.Repeat("x", MaxMessageIDLen+1), Body: itemBody(1)},
		{MessageId: "order-good", Body: itemBody(6)},
	})
	rc.waitCounters(t, "four deliveries ACKed", func(s Snapshot) bool { return s.Total() == 4 })
	rc.stop(t)

	byReason := map[string]inboxRow{}
	for _, r := range e.rows() {
		byReason[r.Status+" "+r.ErrorMsg] = r
	}
	noID, ok := byReason["FAILED message has no message id"]
	if !ok || !strings.HasPrefix(noID.MessageID, "invalid-id:") || string(noID.Content) != string(itemBody(1)) {
		t.Errorf("no FAILED row for the message without id: %+v", e.rows())
	}
	var bad *inboxRow
	for k, r := range byReason {
		if strings.HasPrefix(k, "FAILED malformed message: decoding item:") && r.MessageID == "order-bad" {
			bad = &r
		}
	}
	if bad == nil || string(bad.Content) != "{not json\xff" {
		t.Errorf("no FAILED row with the malformed reason and raw body for order-bad: %+v", e.rows())
	}
	if _, ok := byReason[fmt.Sprintf("FAILED message id is %d bytes, longer than %d", MaxMessageIDLen+1, MaxMessageIDLen)]; !ok {
		t.Errorf("no FAILED row for the over-long id: %+v", e.rows())
	}
	if _, ok := byReason["SUCCESS "]; !ok {
		t.Errorf("order-good was not processed after the bad ones: %+v", e.rows())
	}
	if s := rc.counters.Snapshot(); s.Failed != 3 || s.Processed != 1 {
		t.Errorf("outcomes = %+v, want 3 failed, 1 processed", s)
	}
	e.expectStock(t, initialStock-6, "")
	e.expectQueueDepth(t, 0, "")
}

// A panicking handler costs a retry, not the worker.
func TestHandlerPanicIsRetried(t *testing.T) {
	e := newParallelTestEnv(t)
	var calls atomic.Int64
	h := deductHandler(&calls, func(call int64) error {
		if call == 1 {
			panic("nil map in pricing")
		}
		return nil
	})
	rc := e.startConsumer(e.config(), h)
	e.publish("order-p", itemBody(1))
	e.waitOneRow(t, "order-p", StatusSuccess)
	rc.stop(t)
	if r := e.rows()[0]; r.RetryCount != 1 || !strings.Contains(r.ErrorMsg, "handler panicked: nil map in pricing") {
		t.Errorf("row = %+v, want one retry after the panic", r)
	}
	e.expectStock(t, initialStock-1, "")
}

package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

func publishRange(e *testEnv, from, to int) {
	var msgs []amqp.Publishing
	for i := from; i < to; i++ {
		msgs = append(msgs, amqp.Publishing{MessageId: fmt.Sprintf("m-%d", i), Body: itemBody(1)})
	}
	e.publishMany(msgs)
}

// After the broker connection dies the consumer reconnects and carries on; what was in
// flight is redelivered and absorbed.
func TestConsumerReconnectsAfterConnectionLoss(t *testing.T) {
	e := newParallelTestEnv(t)
	e.exec(`UPDATE stock SET quantity = 1000`)
	var k testenv.ConnKiller
	var calls atomic.Int64
	rc := e.startConsumer(e.config(), deductHandler(&calls, nil), WithDialer(k.Dial))
	publishRange(e, 0, 100)
	rc.waitCounters(t, "some messages processed", func(s Snapshot) bool { return s.Processed >= 30 })
	k.KillAll() // mid-stream: some deliveries are in flight
	publishRange(e, 100, 200)
	testenv.WaitFor(t, 30*time.Second, "all 200 messages SUCCESS", func() (bool, string) {
		n := e.count(`SELECT COUNT(*) FROM consumer_message WHERE status = 'SUCCESS'`)
		return n == 200, fmt.Sprintf("%d SUCCESS rows, dials %d", n, k.Dials())
	})
	e.waitQueueDepth(t, 0)
	rc.stop(t)
	if k.Dials() < 2 {
		t.Errorf("dialled %d times, want a reconnect", k.Dials())
	}
	e.expectStock(t, 1000-200, "")
	e.expectStockLog(t, 200)
}

// Cancelling Run lets the in-flight handler finish and ACKs it; deliveries not yet
// started go back to the queue untouched.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	e := newParallelTestEnv(t)
	held := e.holdFirstCall()
	rc := e.startConsumer(held.cfg, held.h)
	e.publish("g-1", itemBody(1))
	e.publish("g-2", itemBody(1))
	<-held.entered
	rc.cancel()
	select {
	case <-rc.done:
		t.Fatalf("Run returned (%v) while a handler was in flight", rc.err)
	default:
	}
	close(held.release)
	if !rc.wait(20 * time.Second) {
		t.Fatal("Run did not return after the in-flight handler finished")
	}
	if rc.err != nil {
		t.Fatalf("Run returned %v, want nil after cancel", rc.err)
	}
	if rows := e.rows(); len(rows) != 1 || rows[0].MessageID != "g-1" || rows[0].Status != StatusSuccess {
		t.Errorf("rows = %+v, want only g-1 SUCCESS", rows)
	}
	// g-1 was ACKed (else it would be back); g-2 was never started and is back.
	e.expectQueueDepth(t, 1, " (g-2 only)")
}

// Past ShutdownTimeout a stuck handler is cancelled: its transaction rolls back and the
// message is left for redelivery, not recorded as failed.
func TestShutdownTimeoutCancelsStuckHandler(t *testing.T) {
	e := newParallelTestEnv(t)
	cfg := e.config()
	cfg.ShutdownTimeout = 200 * time.Millisecond
	entered := make(chan struct{})
	rc := e.startConsumer(cfg, func(ctx context.Context, tx *sql.Tx, m Message) error {
		if _, err := tx.ExecContext(ctx, `UPDATE stock SET quantity = 0`); err != nil {
			return err
		}
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	})
	e.publish("stuck", itemBody(1))
	<-entered
	rc.stop(t)
	if rows := e.rows(); len(rows) != 0 {
		t.Errorf("rows = %+v, want none: a cancelled handler is not the message's failure", rows)
	}
	e.expectStock(t, initialStock, " (rolled back)")
	e.expectQueueDepth(t, 1, " (left for redelivery)")
}

// When the inbox cannot write (here: its table is gone) nothing durable is known, so
// the delivery is requeued, never ACKed, until the database recovers.
func TestDatabaseErrorRequeuesUntilRecovery(t *testing.T) {
	e := newParallelTestEnv(t)
	core, logs := observer.New(zap.InfoLevel)
	var calls atomic.Int64
	// Through zapslog, as a zap user plugs in.
	rc := e.startConsumerWith(e.config(), deductHandler(&calls, nil), slog.New(zapslog.NewHandler(core)), nil)
	testenv.WaitFor(t, 10*time.Second, "consumer started", func() (bool, string) {
		return logs.FilterMessage("consuming").Len() == 1, "not yet"
	})

	e.exec(`RENAME TABLE consumer_message TO consumer_message_away`)
	e.publish("order-db", itemBody(2))
	testenv.WaitFor(t, 20*time.Second, "the delivery requeued twice", func() (bool, string) {
		n := logs.FilterMessage("inbox could not record the message; requeueing it").Len()
		return n >= 2, fmt.Sprintf("%d requeues", n)
	})
	e.exec(`RENAME TABLE consumer_message_away TO consumer_message`)
	rc.waitCounters(t, "order-db processed after recovery", func(s Snapshot) bool { return s.Processed == 1 })
	rc.stop(t)
	e.expectStock(t, initialStock-2, "")
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	e.expectQueueDepth(t, 0, "")
}

// A consumer pointed at a queue that does not exist fails at start with an error that
// names the queue, instead of reconnecting forever.
func TestMissingQueueFailsFast(t *testing.T) {
	e := newParallelTestEnv(t)
	cfg := e.config()
	cfg.Queue = e.queue + "_missing"
	err := e.startError(t, cfg)
	if err == nil || !strings.Contains(err.Error(), cfg.Queue) || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("Run() = %v, want a NOT_FOUND error naming the queue", err)
	}
}

// A consumer whose inbox table is missing refuses to start and says what to apply.
func TestMissingTableFailsFast(t *testing.T) {
	e := newParallelTestEnv(t)
	cfg := e.config()
	cfg.Table = "no_such_inbox"
	if err := e.startError(t, cfg); err == nil || !strings.Contains(err.Error(), "schema/consumer_message.sql") {
		t.Fatalf("Run() = %v, want an error pointing at the schema", err)
	}
}

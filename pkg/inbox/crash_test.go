package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Test 5: the process dies after the business commit and before the ACK. The broker
// redelivers the message to a fresh consumer, which must recognise it and ACK it
// without doing the work again.
//
// The dying process is this test binary run again (-test.run=TestCrashHelperProcess)
// with the settings in its environment; it SIGKILLs itself in the window between the
// commit and the ACK.
func TestCrashAfterCommitBeforeAck(t *testing.T) {
	e := newParallelTestEnv(t)
	e.publish("order-5", itemBody(7))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(),
		"INBOX_CRASH_HELPER=1", "INBOX_CRASH_DSN="+e.dsn, "INBOX_CRASH_QUEUE="+e.queue)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("helper process did not die: err=%v\n%s", err, out)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("helper process ended with %v, want death by SIGKILL\n%s", err, out)
	}

	// The helper's transaction committed: the work is done and recorded.
	if got := e.stock(); got != initialStock-7 {
		t.Fatalf("stock after the crash = %d, want %d: the helper's commit is missing", got, initialStock-7)
	}
	if rows := e.rows(); len(rows) != 1 || rows[0].Status != StatusSuccess {
		t.Fatalf("inbox rows after the crash = %+v, want one SUCCESS row", rows)
	}
	// The ACK never left, so the broker puts the message back once it sees the
	// connection die.
	e.waitQueueDepth(t, 1)

	var calls atomic.Int64
	var redelivered atomic.Bool
	rc := e.startConsumerWith(e.config(), deductHandler(&calls, nil), nil, func(c *Consumer) {
		c.beforeAck = func(m Message, o Outcome) {
			if m.ID == "order-5" && o == Duplicate {
				redelivered.Store(m.Redelivered)
			}
		}
	})
	rc.waitCounters(t, "the redelivery ACKed as a duplicate", func(s Snapshot) bool { return s.Duplicates == 1 })
	rc.stop(t)

	if n := calls.Load(); n != 0 {
		t.Errorf("handler ran %d times after the crash, want 0", n)
	}
	if !redelivered.Load() {
		t.Errorf("the duplicate was not flagged redelivered by the broker")
	}
	e.expectStock(t, initialStock-7, " (deducted once)")
	e.expectStockLog(t, 1)
	e.expectQueueDepth(t, 0, "")
}

// TestCrashHelperProcess is the process TestCrashAfterCommitBeforeAck kills; it does
// nothing in a normal run.
func TestCrashHelperProcess(t *testing.T) {
	if os.Getenv("INBOX_CRASH_HELPER") != "1" {
		t.Skip("helper process of TestCrashAfterCommitBeforeAck")
	}
	db, err := sql.Open("mysql", os.Getenv("INBOX_CRASH_DSN"))
	if err != nil {
		t.Fatalf("opening database: %v", err)
	}
	cfg := Config{URL: testenv.AMQPURL, Queue: os.Getenv("INBOX_CRASH_QUEUE"), ConsumerName: "inventory",
		Workers: 1, DisableRetryTask: true, DisableRetention: true}
	var calls atomic.Int64
	c, err := New(cfg, db, deductHandler(&calls, nil), slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.beforeAck = func(m Message, o Outcome) {
		if o == Processed {
			fmt.Println("committed", m.ID, "- dying before the ACK")
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never ACK
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	t.Fatalf("helper was not killed (Run returned %v)", err)
}

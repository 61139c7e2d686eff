package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Tests that the inbox holds whatever options its users open their pool with
// (poolOptions and dsnVariants in testenv_test.go).

// deliveryCall is one handler call: which delivery it ran on.
type deliveryCall struct {
	retry       int
	redelivered bool
}

// A handler failed and its failure cannot be recorded: the record's INSERT
// waits on a lock another transaction holds, past innodb_lock_wait_timeout
// (1 s on this pool), three times. The handler ran for this delivery, so it
// must not run again at once: the delivery is requeued and the handler runs
// again on the redelivery only. (The deadlock a failure record could lose three
// times in a row used to come back as a transient error to the delivery's
// transaction, which then ran the handler again on the same delivery.)
func TestUnrecordedFailureRequeuesInsteadOfRerunningHandler(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, "innodb_lock_wait_timeout=1")
	// Hold the gap where PENDING_RETRY rows go in the status indexes, and
	// only that gap: a FAILED and a RETRYING row bound it, so a SUCCESS row
	// (the first attempt's) inserts freely while a failure record waits.
	e.insertRow("bound-failed", StatusFailed, 5, 5, "0 SECOND", "0 SECOND")
	e.insertRow("bound-retrying", StatusRetrying, 1, 5, "1 HOUR", "0 SECOND")
	lock, err := e.d.Primary.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback() }()
	if _, err := lock.Exec(`SELECT id FROM consumer_message FORCE INDEX (idx_consumer_status_next_retry)
		WHERE consumer = 'inventory' AND status = 'PENDING_RETRY' FOR UPDATE`); err != nil {
		t.Fatalf("locking the PENDING_RETRY gap: %v", err)
	}

	var mu sync.Mutex
	var calls []deliveryCall
	second := make(chan struct{})
	h := func(_ context.Context, _ *sql.Tx, m Message) error {
		mu.Lock()
		calls = append(calls, deliveryCall{m.RetryCount, m.Redelivered})
		if len(calls) == 2 {
			close(second)
		}
		mu.Unlock()
		if m.RetryCount == 0 {
			return errors.New("warehouse service unavailable")
		}
		return nil
	}
	rc := e.startConsumer(e.config(), h)
	e.publish("unrecorded-1", itemBody(1))
	select {
	case <-second:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not run a second time within 30s")
	}
	_ = lock.Rollback() // the failure can be recorded now
	testenv.WaitFor(t, 30*time.Second, "unrecorded-1 SUCCESS", func() (bool, string) {
		n := e.count(`SELECT COUNT(*) FROM consumer_message WHERE message_id = 'unrecorded-1' AND status = 'SUCCESS'`)
		return n == 1, fmt.Sprintf("%d SUCCESS rows", n)
	})
	rc.stop(t)

	mu.Lock()
	defer mu.Unlock()
	want := []deliveryCall{{0, false}, {0, true}, {1, false}}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("handler calls (retry count, redelivered) = %v, want %v: one call per delivery, "+
			"the unrecorded first one requeued, then the retry", calls, want)
	}
}

// A pool whose connections run with autocommit=0 (a DSN's system variable):
// the purge still commits its deletes and the retry task still commits the
// claims it gives back. Bare statements would stay uncommitted, holding their
// locks, on a connection back in the pool.
func TestAutocommitOffPoolCommitsPurgeAndRelease(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, "autocommit=0")
	for i := range 3 {
		e.insertRow(fmt.Sprintf("old-%d", i), StatusSuccess, 0, 5, "0 SECOND", "2 HOUR")
	}
	e.insertRow("claimed", StatusRetrying, 1, 5, "1 HOUR", "0 SECOND")
	cfg := e.config()
	cfg.Retention = time.Hour
	p, err := NewPurger(cfg, e.db, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.PurgeOnce(context.Background()); err != nil || n != 3 {
		t.Fatalf("PurgeOnce = %d, %v; want 3 rows", n, err)
	}
	// Counted on another pool (autocommit on): only what was committed.
	if got := e.count(`SELECT COUNT(*) FROM consumer_message WHERE message_id LIKE 'old-%'`); got != 0 {
		t.Errorf("%d purged rows are still there for other connections: the DELETE was not committed", got)
	}

	r := e.newRetrier(t, cfg)
	var c claimed
	c.messageID = "claimed"
	if err := e.d.Primary.QueryRow(`SELECT id, retry_count, max_retry_count, version FROM consumer_message
		WHERE message_id = 'claimed'`).Scan(&c.id, &c.retryCount, &c.maxRetries, &c.version); err != nil {
		t.Fatal(err)
	}
	if _, err := r.release(context.Background(), c, false, ""); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got := e.count(`SELECT COUNT(*) FROM consumer_message WHERE message_id = 'claimed' AND status = 'PENDING_RETRY'`); got != 1 {
		t.Errorf("the released claim is not PENDING_RETRY for other connections: the UPDATE was not committed")
	}
}

// Run refuses a pool whose sessions run with unique_checks=0, before consuming
// anything.
func TestRunRefusesUniqueChecksOff(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, "unique_checks=0")
	err := e.startError(t, e.config())
	if err == nil || !strings.Contains(err.Error(), "unique_checks=0") {
		t.Fatalf("Run() = %v, want a refusal naming unique_checks=0", err)
	}
}

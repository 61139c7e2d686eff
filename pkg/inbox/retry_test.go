package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// insertRow writes an inbox row directly, for tests of the retry task and retention.
func (e *testEnv) insertRow(id, status string, retryCount, maxRetries int, nextRetry, successAgo string) {
	e.t.Helper()
	e.exec(`INSERT INTO consumer_message (consumer, message_id, status, content, content_type, exchange,
		routing_key, retry_count, max_retry_count, next_retry_time, error_msg, success_time)
		VALUES ('inventory', ?, ?, ?, 'application/json', ?, ?, ?, ?,
		        NOW(3) + INTERVAL `+nextRetry+`, 'earlier failure', NOW(3) - INTERVAL `+successAgo+`)`,
		id, status, itemBody(1), e.exchange, routingKey, retryCount, maxRetries)
}

// Several retry tasks (separate connections, as in separate processes) claim each due
// row exactly once.
func TestRetriersClaimEachRowOnce(t *testing.T) {
	e := newParallelTestEnv(t)
	const n = 120
	for i := 0; i < n; i++ {
		e.insertRow(fmt.Sprintf("due-%d", i), StatusPendingRetry, 0, 5, "-1 SECOND", "0 SECOND")
	}
	e.insertRow("not-due", StatusPendingRetry, 0, 5, "1 HOUR", "0 SECOND")

	cfg := e.config()
	cfg.RetryBatch = 7 // many small claims, so the retriers interleave
	var wg sync.WaitGroup
	stats := make([]RetryStats, 3)
	for i := range stats {
		db, err := sql.Open("mysql", e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		pub := NewAMQPPublisher(testenv.AMQPURL, fmt.Sprintf("retrier-%d", i), nil)
		t.Cleanup(func() { _ = pub.Close() })
		r, err := NewRetrier(cfg, db, pub, testLog(t))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := r.RunOnce(context.Background())
			if err != nil {
				t.Errorf("retrier %d: %v", i, err)
			}
			stats[i] = s
		}()
	}
	wg.Wait()

	total := 0
	for _, s := range stats {
		total += s.Republished
	}
	if total != n {
		t.Errorf("republished %d in total (%+v), want %d", total, stats, n)
	}
	e.waitQueueDepth(t, n)
	if got := e.count(`SELECT COUNT(*) FROM consumer_message WHERE status = 'RETRYING'
		AND retry_count = 1 AND version = 1 AND next_retry_time > NOW(3)`); got != n {
		t.Errorf("%d rows RETRYING with retry_count 1 and version 1, want %d", got, n)
	}
	if got := e.count(`SELECT COUNT(*) FROM consumer_message WHERE message_id = 'not-due'
		AND status = 'PENDING_RETRY' AND version = 0`); got != 1 {
		t.Errorf("the row not yet due was touched")
	}
}

// RETRYING rows past their deadline are taken back: retried again if retries are left,
// FAILED with the reason if not. A row locked by a consumer working on it is skipped.
func TestStuckRetryingRowsAreTakenBack(t *testing.T) {
	e := newParallelTestEnv(t)
	e.insertRow("stuck-retry-left", StatusRetrying, 1, 3, "-1 SECOND", "0 SECOND")
	e.insertRow("stuck-no-retry-left", StatusRetrying, 3, 3, "-1 SECOND", "0 SECOND")
	e.insertRow("stuck-but-busy", StatusRetrying, 1, 3, "-1 SECOND", "0 SECOND")
	e.insertRow("in-time", StatusRetrying, 1, 3, "1 HOUR", "0 SECOND")

	// A consumer is handling stuck-but-busy right now: it holds the row lock.
	busy, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Rollback()
	// Through the unique key, as the inbox does: a scan would lock every row it passes.
	if _, err := busy.Exec(`SELECT id FROM consumer_message
		WHERE consumer = 'inventory' AND message_id = 'stuck-but-busy' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	r := e.newRetrier(t, e.config())
	s, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	// The row with a retry left is due at once, so the same round republishes it.
	if s.Reset != 1 || s.Failed != 1 || s.Republished != 1 {
		t.Errorf("stats = %+v, want 1 reset, 1 failed, 1 republished", s)
	}
	got := map[string]inboxRow{}
	for _, r := range e.rows() {
		got[r.MessageID] = r
	}
	if r := got["stuck-retry-left"]; r.Status != StatusRetrying || r.RetryCount != 2 {
		t.Errorf("stuck-retry-left = %+v, want RETRYING again with retry_count 2", r)
	}
	if r := got["stuck-no-retry-left"]; r.Status != StatusFailed ||
		!strings.Contains(r.ErrorMsg, "retry 3 was not consumed within 30s; last error: earlier failure") {
		t.Errorf("stuck-no-retry-left = %+v, want FAILED with the reason", r)
	}
	if r := got["stuck-but-busy"]; r.Status != StatusRetrying || r.Version != 0 {
		t.Errorf("stuck-but-busy = %+v, want untouched while locked", r)
	}
	if r := got["in-time"]; r.Status != StatusRetrying || r.Version != 0 {
		t.Errorf("in-time = %+v, want untouched", r)
	}
}

// A republish that the broker cannot route uses up a retry, so it ends FAILED rather
// than circling forever.
func TestUnroutableRepublishUsesRetries(t *testing.T) {
	e := newParallelTestEnv(t)
	e.insertRow("lost-route", StatusPendingRetry, 0, 1, "-1 SECOND", "0 SECOND")
	e.exec(`UPDATE consumer_message SET routing_key = 'nobody-listens'`)
	cfg := e.config()
	cfg.RetryBackoff = time.Millisecond
	cfg.RetryMaxBackoff = time.Millisecond
	r := e.newRetrier(t, cfg)
	testenv.WaitFor(t, 10*time.Second, "lost-route FAILED", func() (bool, string) {
		if _, err := r.RunOnce(context.Background()); err != nil {
			return false, err.Error()
		}
		rows := e.rows()
		return rows[0].Status == StatusFailed, fmt.Sprintf("%+v", rows[0])
	})
	r0 := e.rows()[0]
	if r0.RetryCount != 1 || !strings.Contains(r0.ErrorMsg, "unroutable") {
		t.Errorf("row = %+v, want retry_count 1 and an unroutable reason", r0)
	}
}

// The retention purge deletes old SUCCESS rows in batches and keeps everything else.
func TestRetentionPurgesOldSuccessRows(t *testing.T) {
	e := newParallelTestEnv(t)
	for i := 0; i < 25; i++ {
		e.insertRow(fmt.Sprintf("old-%d", i), StatusSuccess, 0, 5, "0 SECOND", "2 HOUR")
	}
	for i := 0; i < 3; i++ {
		e.insertRow(fmt.Sprintf("recent-%d", i), StatusSuccess, 0, 5, "0 SECOND", "1 MINUTE")
	}
	e.insertRow("old-failed", StatusFailed, 5, 5, "0 SECOND", "2 HOUR")
	e.exec(`INSERT INTO consumer_message (consumer, message_id, status, content, success_time)
		VALUES ('other-service', 'old-other', 'SUCCESS', '', NOW(3) - INTERVAL 2 HOUR)`)

	cfg := e.config()
	cfg.Retention, cfg.RetentionBatch = time.Hour, 10
	p, err := NewPurger(cfg, e.db, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.PurgeOnce(context.Background())
	if err != nil {
		t.Fatalf("PurgeOnce: %v", err)
	}
	if n != 25 {
		t.Errorf("purged %d rows, want 25", n)
	}
	if got := e.count(`SELECT COUNT(*) FROM consumer_message`); got != 5 {
		t.Errorf("%d rows left, want 5 (3 recent, 1 FAILED, 1 of another consumer)", got)
	}
	if got := e.count(`SELECT COUNT(*) FROM consumer_message WHERE message_id LIKE 'old-%' AND status = 'SUCCESS' AND consumer = 'inventory'`); got != 0 {
		t.Errorf("%d old SUCCESS rows survived", got)
	}
}

// newRetrier is a Retrier over e's inbox that republishes to the stack's
// broker; its publisher is closed when the test ends.
func (e *testEnv) newRetrier(t testing.TB, cfg Config) *Retrier {
	t.Helper()
	pub := NewAMQPPublisher(testenv.AMQPURL, "retrier", nil)
	t.Cleanup(func() { _ = pub.Close() })
	r, err := NewRetrier(cfg, e.db, pub, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

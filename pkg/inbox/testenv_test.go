package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Integration tests run against the real servers of the test stack, reached
// through internal/testenv (which imports none of the relay's packages, so
// these in-package tests may use it). Each test gets its own database,
// exchange and queue (and Redis key prefix), so tests are independent and may
// run beside other packages' tests. An unreachable server fails the test;
// -short skips integration tests instead.

const (
	testSKU      = "sku-1"
	initialStock = 100
	routingKey   = "item"
)

type testEnv struct {
	t        testing.TB
	d        *testenv.DB
	db       *sql.DB       // on dsn, as the inbox's users open it
	dsn      string        // d.DSN with poolOptions (no secrets printed)
	ch       *amqp.Channel // confirm mode, for publishing and inspecting
	exchange string
	queue    string
}

// poolOptions are added to the DSN an application writes (testenv.DB.DSN:
// parseTime, interpolateParams, one statement per call) for the pool the inbox
// gets in every test. Users open their pools with all sorts of options and the
// inbox must not depend on them: multiStatements=true (often on for migrations)
// and clientFoundRows=true (RowsAffected then counts the rows an UPDATE
// matched, not those it changed, and the version-checked updates read it) are
// common, so the whole suite runs with them. RELAY_TEST_INBOX_DSN_OPTIONS adds
// more to every test (autocommit=0, interpolateParams=false...), and
// TestConcurrentFailuresRunEachHandlerOncePerDelivery runs on dsnVariants.
var poolOptions = joinOptions("multiStatements=true&clientFoundRows=true",
	testenv.Env("RELAY_TEST_INBOX_DSN_OPTIONS", ""))

// dsnVariants are pools opened as users open theirs, for the tests that must
// hold on every one of them: name, then the DSN options added to poolOptions
// (later options override earlier ones).
var dsnVariants = []struct{ name, options string }{
	{"default", ""},
	{"single-statement", "multiStatements=false&clientFoundRows=false"},
	{"server-side-prepare", "interpolateParams=false"},
	{"autocommit-off", "autocommit=0"},
	{"read-committed", isolationVar() + "=%27READ-COMMITTED%27"},
}

// isolationVar is the session variable of the transaction isolation level:
// MariaDB 10.11 knows only tx_isolation, MySQL 8.0 and later only
// transaction_isolation.
func isolationVar() string {
	if testenv.Current.MySQL {
		return "transaction_isolation"
	}
	return "tx_isolation"
}

// joinOptions joins DSN options with "&", leaving out empty ones.
func joinOptions(opts ...string) string {
	var out []string
	for _, o := range opts {
		if o != "" {
			out = append(out, o)
		}
	}
	return strings.Join(out, "&")
}

// newTestEnv creates a database with the inbox schema and a stock table, and an exchange
// bound to a queue. Everything is dropped when the test ends.
func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	return newTestEnvWith(t, "")
}

// newTestEnvWith is newTestEnv with more DSN options (joined with "&") on the
// inbox's pool, after poolOptions.
func newTestEnvWith(t testing.TB, options string) *testEnv {
	t.Helper()
	testenv.Integration(t)
	e := &testEnv{t: t}
	e.openDB(options)
	e.openBroker()
	return e
}

// newParallelTestEnv is newTestEnv for a test that runs beside the others.
func newParallelTestEnv(t *testing.T) *testEnv {
	t.Helper()
	t.Parallel()
	return newTestEnv(t)
}

func (e *testEnv) openDB(options string) {
	e.d = testenv.NewPrimaryDB(e.t, "schema/consumer_message.sql")
	sep := "?"
	if strings.Contains(e.d.DSN, "?") {
		sep = "&"
	}
	e.dsn = e.d.DSN + sep + joinOptions(poolOptions, options)
	db, err := sql.Open("mysql", e.dsn)
	if err != nil {
		e.t.Fatalf("opening test database: %v", err)
	}
	e.t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	e.db = db
	e.exec(`CREATE TABLE stock (sku VARCHAR(64) PRIMARY KEY, quantity INT NOT NULL)`)
	// No unique key on message_id: a double deduction must show up as two rows rather
	// than be hidden by a second idempotency guard.
	e.exec(`CREATE TABLE stock_log (id BIGINT AUTO_INCREMENT PRIMARY KEY,
		message_id VARCHAR(128) NOT NULL, sku VARCHAR(64) NOT NULL, qty INT NOT NULL)`)
	e.exec(`INSERT INTO stock VALUES (?, ?)`, testSKU, initialStock)
}

// openBroker binds the test queue to a fresh exchange by routingKey alone (a
// republish with another key is unroutable), and opens a channel in confirm
// mode for publishing and inspecting.
func (e *testEnv) openBroker() {
	b := testenv.NewKeyedBroker(e.t, routingKey)
	e.exchange, e.queue = b.Exchange, b.Queue
	_, ch := testenv.Dial(e.t)
	if err := ch.Confirm(false); err != nil {
		e.t.Fatalf("confirm mode: %v", err)
	}
	e.ch = ch
}

func (e *testEnv) exec(query string, args ...any) {
	e.t.Helper()
	e.d.Exec(e.t, query, args...)
}

// config is a Config with test-sized intervals.
func (e *testEnv) config() Config {
	return Config{
		URL: testenv.AMQPURL, Queue: e.queue, ConsumerName: "inventory",
		Workers: 4, ReconnectDelay: 50 * time.Millisecond, RequeueDelay: 50 * time.Millisecond,
		ShutdownTimeout: 20 * time.Second,
		RetryBackoff:    20 * time.Millisecond, RetryMaxBackoff: 100 * time.Millisecond,
		RetryInterval: 20 * time.Millisecond, RetryStuckTimeout: 30 * time.Second,
		DisableRetention: true,
	}
}

type item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

func itemBody(qty int) []byte {
	b, _ := json.Marshal(item{SKU: testSKU, Qty: qty})
	return b
}

// publish sends one persistent message and waits for the broker's confirm.
func (e *testEnv) publish(id string, body []byte) {
	e.t.Helper()
	e.publishMany([]amqp.Publishing{{MessageId: id, Body: body}})
}

func (e *testEnv) publishMany(msgs []amqp.Publishing) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var pending []*amqp.DeferredConfirmation
	for i, m := range msgs {
		m.DeliveryMode, m.ContentType = amqp.Persistent, "application/json"
		dc, err := e.ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, routingKey, true, false, m)
		if err != nil {
			e.t.Fatalf("publishing message %d: %v", i, err)
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			e.t.Fatalf("publish not confirmed: ack=%v err=%v", ok, err)
		}
	}
}

func (e *testEnv) queueDepth() int {
	e.t.Helper()
	return testenv.QueueDepth(e.t, e.ch, e.queue)
}

func (e *testEnv) stock() int {
	e.t.Helper()
	var q int
	if err := e.db.QueryRow(`SELECT quantity FROM stock WHERE sku = ?`, testSKU).Scan(&q); err != nil {
		e.t.Fatalf("reading stock: %v", err)
	}
	return q
}

// expectStock marks the test failed (and lets it go on) unless the stock is
// want; why is added to the message.
func (e *testEnv) expectStock(t testing.TB, want int, why string) {
	t.Helper()
	if got := e.stock(); got != want {
		t.Errorf("stock = %d, want %d%s", got, want, why)
	}
}

// expectQueueDepth marks the test failed (and lets it go on) unless the
// queue holds want ready messages; why is added to the message.
func (e *testEnv) expectQueueDepth(t testing.TB, want int, why string) {
	t.Helper()
	if d := e.queueDepth(); d != want {
		t.Errorf("queue holds %d messages, want %d%s", d, want, why)
	}
}

// expectStockLog marks the test failed (and lets it go on) unless the
// handler logged want deductions.
func (e *testEnv) expectStockLog(t testing.TB, want int) {
	t.Helper()
	if got := e.count(`SELECT COUNT(*) FROM stock_log`); got != want {
		t.Errorf("stock_log rows = %d, want %d", got, want)
	}
}

// waitQueueDepth waits until the queue holds want ready messages.
func (e *testEnv) waitQueueDepth(t testing.TB, want int) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("%d messages in the queue", want), func() (bool, string) {
		d := e.queueDepth()
		return d == want, fmt.Sprintf("queue depth %d", d)
	})
}

func (e *testEnv) count(query string, args ...any) int {
	e.t.Helper()
	return e.d.Count(e.t, query, args...)
}

type inboxRow struct {
	MessageID  string
	Status     string
	RetryCount int
	ErrorMsg   string
	Content    []byte
	Version    int
}

func (e *testEnv) rows() []inboxRow {
	e.t.Helper()
	rs, err := e.db.Query(`SELECT message_id, status, retry_count, COALESCE(error_msg, ''), content, version
		FROM consumer_message ORDER BY id`)
	if err != nil {
		e.t.Fatalf("reading inbox rows: %v", err)
	}
	defer rs.Close()
	var out []inboxRow
	for rs.Next() {
		var r inboxRow
		if err := rs.Scan(&r.MessageID, &r.Status, &r.RetryCount, &r.ErrorMsg, &r.Content, &r.Version); err != nil {
			e.t.Fatalf("scanning inbox row: %v", err)
		}
		out = append(out, r)
	}
	return out
}

// waitOneRow waits until the inbox holds a single row, id's, with status.
func (e *testEnv) waitOneRow(t testing.TB, id, status string) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, id+" "+status, func() (bool, string) {
		rows := e.rows()
		return len(rows) == 1 && rows[0].MessageID == id && rows[0].Status == status, fmt.Sprintf("%+v", rows)
	})
}

// deductHandler is the business handler of the tests: it deducts stock and logs the
// deduction, then asks fail whether to fail this call (after the writes, so a failure
// proves they roll back).
func deductHandler(calls *atomic.Int64, fail func(call int64) error) Handler {
	return func(ctx context.Context, tx *sql.Tx, m Message) error {
		n := calls.Add(1)
		var it item
		if err := json.Unmarshal(m.Body, &it); err != nil {
			return Malformed(fmt.Errorf("decoding item: %w", err))
		}
		if it.SKU == "" || it.Qty <= 0 {
			return Malformed(fmt.Errorf("item needs a sku and a positive qty, got %+v", it))
		}
		if _, err := tx.ExecContext(ctx, `UPDATE stock SET quantity = quantity - ? WHERE sku = ?`, it.Qty, it.SKU); err != nil {
			return fmt.Errorf("deducting stock: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO stock_log (message_id, sku, qty) VALUES (?, ?, ?)`,
			m.ID, it.SKU, it.Qty); err != nil {
			return fmt.Errorf("logging deduction: %w", err)
		}
		if fail != nil {
			return fail(n)
		}
		return nil
	}
}

// heldFirstCall is a single-slot consumer set-up (one worker, one prefetch)
// whose handler, deductHandler counting in calls, holds its first call after
// its writes: entered is closed once it holds, and it goes on once release is
// closed.
type heldFirstCall struct {
	cfg              Config
	h                Handler
	calls            atomic.Int64
	entered, release chan struct{}
}

func (e *testEnv) holdFirstCall() *heldFirstCall {
	held := &heldFirstCall{cfg: e.config(), entered: make(chan struct{}), release: make(chan struct{})}
	held.cfg.Workers, held.cfg.Prefetch = 1, 1
	held.h = deductHandler(&held.calls, func(call int64) error {
		if call == 1 {
			close(held.entered)
			<-held.release
		}
		return nil
	})
	return held
}

// startError runs a consumer on cfg that must refuse to start, and returns
// what Run returned; Run still going after 20s fails the test.
func (e *testEnv) startError(t testing.TB, cfg Config) error {
	t.Helper()
	c, err := New(cfg, e.db, deductHandler(new(atomic.Int64), nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = c.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run took until the deadline instead of failing fast (%v)", err)
	}
	return err
}

type runningConsumer struct {
	c        *Consumer
	counters *Counters
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{} // closed when Run returns
	err      error         // what Run returned, once done is closed
}

func (rc *runningConsumer) run(ctx context.Context) {
	defer close(rc.done)
	rc.err = rc.c.Run(ctx)
}

// startConsumer runs a Consumer until stop (or the end of the test).
func (e *testEnv) startConsumer(cfg Config, h Handler, opts ...Option) *runningConsumer {
	e.t.Helper()
	return e.startConsumerWith(cfg, h, nil, nil, opts...)
}

// startConsumerWith is startConsumer logging to log (nil: the test's log)
// and calling setup (if not nil) on the Consumer before it runs.
func (e *testEnv) startConsumerWith(cfg Config, h Handler, log *slog.Logger, setup func(*Consumer), opts ...Option) *runningConsumer {
	e.t.Helper()
	rc := &runningConsumer{counters: &Counters{}, done: make(chan struct{})}
	if log == nil {
		log = testLog(e.t)
	}
	c, err := New(cfg, e.db, h, log, append([]Option{WithMetrics(rc.counters)}, opts...)...)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	if setup != nil {
		setup(c)
	}
	rc.c = c
	ctx, cancel := context.WithCancel(context.Background())
	rc.cancel = cancel
	go rc.run(ctx)
	e.t.Cleanup(func() { rc.stop(e.t) })
	return rc
}

// stop cancels the consumer and waits for Run to return.
func (rc *runningConsumer) stop(t testing.TB) {
	t.Helper()
	rc.stopOnce.Do(func() {
		rc.cancel()
		if !rc.wait(30 * time.Second) {
			t.Errorf("consumer did not stop within 30s")
		} else if rc.err != nil {
			t.Errorf("consumer Run returned %v", rc.err)
		}
	})
}

// wait waits up to within for Run to return, and tells whether it did.
func (rc *runningConsumer) wait(within time.Duration) bool {
	select {
	case <-rc.done:
		return true
	case <-time.After(within):
		return false
	}
}

// waitCounters waits until the consumer's outcomes satisfy cond.
func (rc *runningConsumer) waitCounters(t testing.TB, what string, cond func(Snapshot) bool) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, what, func() (bool, string) {
		s := rc.counters.Snapshot()
		return cond(s), fmt.Sprintf("%+v", s)
	})
}

// testLog writes the inbox's logs into the test's output, from info up.
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// useSeedTables replaces the project's consumer_message with the design
// documents' tables exactly as written (testdata/seed/seed-ddl.sql).
func (e *testEnv) useSeedTables() {
	e.t.Helper()
	ddl, err := os.ReadFile(filepath.Join("..", "..", "testdata", "seed", "seed-ddl.sql"))
	if err != nil {
		e.t.Fatalf("reading the seed DDL: %v", err)
	}
	cfg, _ := mysql.ParseDSN(e.dsn)
	cfg.MultiStatements = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("DROP TABLE consumer_message; " + string(ddl)); err != nil {
		e.t.Fatalf("creating the seed tables: %v", err)
	}
}

// failFirst wraps the deduct handler: the first application of each listed
// message fails after its writes (which roll back).
func failFirst(calls *atomic.Int64, ids map[string]bool) Handler {
	var mu sync.Mutex
	failed := map[string]bool{}
	return deductHandler(calls, nil).wrap(func(m Message) error {
		mu.Lock()
		defer mu.Unlock()
		if ids[m.ID] && !failed[m.ID] {
			failed[m.ID] = true
			return errors.New("warehouse service unavailable")
		}
		return nil
	})
}

// wrap runs h, then after (when h succeeded) inside the same transaction.
func (h Handler) wrap(after func(Message) error) Handler {
	return func(ctx context.Context, tx *sql.Tx, m Message) error {
		if err := h(ctx, tx, m); err != nil {
			return err
		}
		return after(m)
	}
}

// publishTwice publishes n messages, every one of them twice (a relay replay
// or a sweeper racing the binlog path), interleaved.
func (e *testEnv) publishTwice(prefix string, n int) {
	e.t.Helper()
	var msgs []amqp.Publishing
	for round := 0; round < 2; round++ {
		for i := 0; i < n; i++ {
			msgs = append(msgs, amqp.Publishing{MessageId: fmt.Sprintf("%s-%03d", prefix, i), Body: itemBody(1)})
		}
	}
	e.publishMany(msgs)
}

// The design's consumer_message (message_id unique on its own, no consumer
// column, DATETIME without fractions): each event is applied once although
// every one is delivered twice, and handler failures are retried through the
// table's own PENDING_RETRY / RETRYING states.
func TestSeedConsumerMessageAppliesOnce(t *testing.T) {
	e := newParallelTestEnv(t)
	e.useSeedTables()
	cfg := e.config()
	cfg.Preset = "consumer-message"
	const n = 60
	var calls atomic.Int64
	failing := map[string]bool{"cm-007": true, "cm-021": true, "cm-042": true}
	e.startConsumer(cfg, failFirst(&calls, failing))
	e.publishTwice("cm", n)

	testenv.WaitFor(t, 60*time.Second, "every event applied and SUCCESS", func() (bool, string) {
		applied := e.count(`SELECT COUNT(*) FROM stock_log`)
		success := e.count(`SELECT COUNT(*) FROM consumer_message WHERE status = 'SUCCESS'`)
		return applied == n && success == n, fmt.Sprintf("%d applied, %d SUCCESS rows", applied, success)
	})
	e.waitQueueDepth(t, 0)
	if got := e.count(`SELECT COUNT(DISTINCT message_id) FROM stock_log`); got != n {
		t.Fatalf("%d distinct messages applied, want %d", got, n)
	}
	if s := e.stock(); s != initialStock-n {
		t.Fatalf("stock %d, want %d: an event was applied twice or not at all", s, initialStock-n)
	}
	if got := e.count(`SELECT COUNT(*) FROM consumer_message`); got != n {
		t.Fatalf("%d inbox rows, want %d", got, n)
	}
	if got := e.count(`SELECT COUNT(*) FROM consumer_message WHERE retry_count >= 1 AND message_id IN ('cm-007', 'cm-021', 'cm-042')
		AND first_consume_time IS NOT NULL AND success_time IS NOT NULL AND version >= 2`); got != len(failing) {
		t.Fatalf("%d of the failed-then-retried messages show their retry, want %d", got, len(failing))
	}
	t.Logf("%d events delivered twice: %d applications, %d handler calls", n, e.count(`SELECT COUNT(*) FROM stock_log`), calls.Load())
}

// t_msg_dedup with its t_message_log processing log: each event is applied
// once although delivered twice; a failed handler's delivery is requeued and
// counted in the log (PROCESSING, then SUCCESS); one that never succeeds is
// FAILED with its error after MaxRetries.
func TestSeedMsgDedupAppliesOnce(t *testing.T) {
	e := newParallelTestEnv(t)
	e.useSeedTables()
	cfg := e.config()
	cfg.Preset, cfg.LogTable, cfg.MaxRetries = "msg-dedup", "t_message_log", 2
	const n = 60
	var calls atomic.Int64
	failing := map[string]bool{"dd-003": true, "dd-033": true}
	h := failFirst(&calls, failing).wrap(func(m Message) error {
		if m.ID == "dd-050" {
			return errors.New("this one never works")
		}
		return nil
	})
	e.startConsumer(cfg, h)
	e.publishTwice("dd", n)

	testenv.WaitFor(t, 60*time.Second, "every event applied or FAILED", func() (bool, string) {
		applied := e.count(`SELECT COUNT(*) FROM stock_log`)
		dedup := e.count(`SELECT COUNT(*) FROM t_msg_dedup`)
		failed := e.count(`SELECT COUNT(*) FROM t_message_log WHERE status = 'FAILED'`)
		return applied == n-1 && dedup == n-1 && failed == 1, fmt.Sprintf("%d applied, %d dedup rows, %d FAILED", applied, dedup, failed)
	})
	e.waitQueueDepth(t, 0)
	if got := e.count(`SELECT COUNT(DISTINCT message_id) FROM stock_log`); got != n-1 {
		t.Fatalf("%d distinct messages applied, want %d", got, n-1)
	}
	if s := e.stock(); s != initialStock-(n-1) {
		t.Fatalf("stock %d, want %d", s, initialStock-(n-1))
	}
	if got := e.count(`SELECT COUNT(*) FROM t_message_log WHERE status = 'SUCCESS'`); got != n-1 {
		t.Fatalf("%d SUCCESS log rows, want %d", got, n-1)
	}
	// At least the scripted failure; a deadlock between workers on the
	// shared stock row is a failed attempt too.
	if got := e.count(`SELECT COUNT(*) FROM t_message_log WHERE msg_id IN ('dd-003', 'dd-033') AND status = 'SUCCESS' AND retry_count >= 1`); got != 2 {
		t.Fatalf("%d of the failed-then-requeued messages logged SUCCESS after their failure, want 2", got)
	}
	var status, errText string
	var retries int
	if err := e.db.QueryRow(`SELECT status, retry_count, error FROM t_message_log WHERE msg_id = 'dd-050'`).Scan(&status, &retries, &errText); err != nil {
		t.Fatal(err)
	}
	if status != "FAILED" || retries != cfg.MaxRetries+1 || !strings.Contains(errText, "this one never works") {
		t.Fatalf("dd-050 logged %s after %d failures with %q, want FAILED after %d with the error", status, retries, errText, cfg.MaxRetries+1)
	}
	if got := e.count(`SELECT COUNT(*) FROM t_msg_dedup WHERE msg_id = 'dd-050'`); got != 0 {
		t.Fatal("the message that never succeeded has a dedup row")
	}
}

// Mapping errors name the field, as outbox mappings' do.
func TestInboxMappingErrorsNameTheField(t *testing.T) {
	valid := Config{URL: "amqp://x", Queue: "q", ConsumerName: "c"}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"unknown preset", func(c *Config) { c.Preset = "consumer_message" }, `Preset: unknown preset "consumer_message"`},
		{"bad column name", func(c *Config) { c.Columns.MessageID = "msg-id" }, "Columns.MessageID"},
		{"required column cleared", func(c *Config) { c.Preset = "consumer-message"; c.Columns.Version = "-" }, "Columns.Version: required"},
		{"dedup without created", func(c *Config) { c.Preset = "msg-dedup"; c.Columns.CreatedAt = "-" }, "Columns.CreatedAt: required"},
		{"log on a state table", func(c *Config) { c.LogTable = "t_message_log" }, "LogTable: only a dedup table"},
		{"bad log column", func(c *Config) {
			c.Preset, c.LogTable, c.LogColumns.Status = "msg-dedup", "t_message_log", "st atus"
		}, "LogColumns.Status"},
		{"bad table", func(c *Config) { c.Table = "inbox;drop" }, "Table"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := valid
			c.edit(&cfg)
			err := cfg.WithDefaults().Validate()
			if err == nil || !strings.Contains(err.Error(), "inbox config: "+c.want) {
				t.Fatalf("Validate() = %v, want it to name %q", err, c.want)
			}
		})
	}
	for _, p := range PresetNames() {
		cfg := valid
		cfg.Preset = p
		if err := cfg.WithDefaults().Validate(); err != nil {
			t.Errorf("preset %s does not validate: %v", p, err)
		}
	}
}

// A failure of a second copy of a message, recorded after the message went
// FAILED (both copies were in flight at its last attempt), counts nothing:
// the log stays FAILED at MaxRetries+1 attempts (it read 4 of 3 now and
// then in TestSeedMsgDedupAppliesOnce).
func TestSeedMsgDedupFailureAfterFailedCountsNothing(t *testing.T) {
	e := newParallelTestEnv(t)
	e.useSeedTables()
	cfg := e.config()
	cfg.Preset, cfg.LogTable, cfg.MaxRetries = "msg-dedup", "t_message_log", 2
	c, err := New(cfg, e.db, func(context.Context, *sql.Tx, Message) error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := c.Inbox()
	m := Message{ID: "late-1", Exchange: "ex"}
	var outcomes []Outcome
	for range 4 {
		out, _ := in.dedupFailed(context.Background(), m, errors.New("broken"))
		outcomes = append(outcomes, out)
	}
	var status string
	var retries int
	if err := e.db.QueryRow(`SELECT status, retry_count FROM t_message_log WHERE msg_id = 'late-1'`).Scan(&status, &retries); err != nil {
		t.Fatal(err)
	}
	if status != "FAILED" || retries != cfg.MaxRetries+1 || outcomes[2] != Failed || outcomes[3] != Failed {
		t.Fatalf("after four failures: %s with %d attempts, outcomes %v; want FAILED with %d, Failed from the third on",
			status, retries, outcomes, cfg.MaxRetries+1)
	}
}

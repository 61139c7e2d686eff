package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// payload is a row's content: the time it was written (µs since the epoch,
// for commit-to-delivery latency) and padding to the configured size.
func payload(t time.Time, size int) string {
	head := fmt.Sprintf(`{"t":%d,"pad":"`, t.UnixMicro())
	n := max(size-len(head)-2, 0)
	return head + strings.Repeat("x", n) + `"}`
}

// insertRows writes n rows in multi-row INSERTs of per rows each, with
// message ids prefix + sequence number. status is PENDING or SENT.
// Each statement commits on its own unless tx is given.
func (e *env) insertRows(ctx context.Context, ex execer, prefix string, n, per int, status string) error {
	return insertRowsInto(ctx, ex, e.outboxRows(), prefix, n, per, status)
}

// outboxRows are the seed table's rows: to the run's exchange, with a
// -payload byte payload.
func (e *env) outboxRows() rowSpec {
	return rowSpec{table: "producer_message", exchange: e.topo.exchange, size: e.o.payload}
}

type execer interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}

// rowSpec says where rows go and how large their payload is.
type rowSpec struct {
	table, exchange string
	size            int
}

// insertRowsInto is insertRows for another table, exchange or payload size.
func insertRowsInto(ctx context.Context, ex execer, spec rowSpec, prefix string, n, per int, status string) error {
	content := payload(time.Time{}, spec.size)
	var b strings.Builder
	for i := 0; i < n; i += per {
		b.Reset()
		b.WriteString("INSERT INTO " + spec.table + " (message_id, exchange, routing_key, content, status, next_retry_time) VALUES ")
		for j := i; j < min(i+per, n); j++ {
			if j > i {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s%d','%s','bench.created','%s','%s',NOW(3))", prefix, j, spec.exchange, content, status)
		}
		if _, err := ex.ExecContext(ctx, b.String()); err != nil {
			return fmt.Errorf("inserting rows: %w", err)
		}
	}
	return nil
}

// growTo adds SENT rows until the table holds size of them.
func (e *env) growTo(ctx context.Context, size int) error {
	if size <= e.seeded {
		return nil
	}
	start := time.Now()
	if err := e.insertRows(ctx, e.primary, fmt.Sprintf("sent%d-", e.seeded), size-e.seeded, 5000, "SENT"); err != nil {
		return err
	}
	if err := e.primary.QueryRowContext(ctx, "SELECT COALESCE(MAX(id), 0) FROM producer_message").Scan(&e.watermark); err != nil {
		return err
	}
	e.seeded = size
	if err := e.quiesce(ctx); err != nil {
		return err
	}
	progress("table holds %d SENT rows (seeded and replicated in %s)", size, time.Since(start).Round(time.Millisecond))
	return nil
}

// reset removes every row a run added above the seeded ones, so each run
// starts with the same table.
func (e *env) reset(ctx context.Context) error {
	for {
		res, err := e.primary.ExecContext(ctx, "DELETE FROM producer_message WHERE id > ? ORDER BY id LIMIT 20000", e.watermark)
		if err != nil {
			return fmt.Errorf("removing the run's rows: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			break
		}
	}
	return e.quiesce(ctx)
}

// unsent counts the run's rows not SENT (on the primary).
func (e *env) unsent(ctx context.Context) (int, error) {
	var n int
	err := e.primary.QueryRowContext(ctx, "SELECT COUNT(*) FROM producer_message WHERE id > ? AND status <> 'SENT'", e.watermark).Scan(&n)
	return n, err
}

// waitAllSent waits until every row of the run is SENT.
func (e *env) waitAllSent(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n, err := e.unsent(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d rows still not SENT after %s", n, within)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// nextPrefix names a run's message ids.
func (e *env) nextPrefix(what string) string {
	e.phase++
	return fmt.Sprintf("%s%02d-", what, e.phase)
}

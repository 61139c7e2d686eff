package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// consoleRows is the outbox table's size in the console step.
const consoleRows = 1000000

// consoleStep measures the queries the operator's console sends to the
// replica (docs/console.md) on a consoleRows-row outbox table (the seed
// schema, schema/producer_message.sql) loaded on the replica alone: 1% of
// the rows FAILED in three reasons and 0.2% retrying, then 20% FAILED. For
// each query it prints the EXPLAIN and reports the median of five runs.
func consoleStep(ctx context.Context, e *env, rep *report) error {
	db := e.dbName + "_cq"
	progress("console: %d rows loaded on the replica; the console's queries timed on it", consoleRows)
	if err := createReconcileDB(ctx, e, db); err != nil { // reconcile.go: the seed outbox table
		return err
	}
	defer dropReconcileDB(e, db)
	if err := loadReplicaRows(ctx, e, db, consoleRows, "cq-", "bench.original", false); err != nil { // reconcile.go
		return err
	}
	conn, err := openDB(e.o.replicaDSN, db, map[string]string{"sql_log_bin": "0", "parseTime": "true"})
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, q := range []string{
		`UPDATE producer_message SET status = 'FAILED', retry_count = 5, update_time = NOW(3),
			error_msg = CONCAT('exchange does not exist: "gone-', id % 3, '" (404 NOT_FOUND, checked passively)') WHERE id % 100 = 0`,
		`UPDATE producer_message SET status = 'PENDING', retry_count = 2, error_msg = 'nacked by the broker', update_time = NOW(3),
			next_retry_time = NOW(3) + INTERVAL 1 MINUTE WHERE id % 500 = 1`,
		"ANALYZE TABLE producer_message",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("preparing the failed rows: %w", err)
		}
	}
	t, err := outbox.Preset("producer-message")
	if err != nil {
		return err
	}
	t.Schema = db
	if err := t.Validate("tables[0]"); err != nil {
		return err
	}
	if err := consoleQueries(ctx, conn, &t, rep, ""); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `UPDATE producer_message SET status = 'FAILED', retry_count = 5, update_time = NOW(3),
			error_msg = 'unroutable: no queue bound (312 NO_ROUTE)' WHERE id % 5 = 2`); err != nil {
		return err
	}
	progress("  now 20%% of the rows FAILED (the groups query reads at most 50,000 of them)")
	return consoleQueries(ctx, conn, &t, rep, "many_failed_")
}

// consoleQueries times each console query on t and reports it under
// console_<tag><query>_ms.
func consoleQueries(ctx context.Context, db *sql.DB, t *outbox.Table, rep *report, tag string) error {
	groups, gargs, _ := outboxsql.FailureGroupsSQL(t, 50000, 100)
	reason := `exchange does not exist: "gone-1" (404 NOT_FOUND, checked passively)`
	cols := outboxsql.RowColumns(t, false)
	first, fargs := outboxsql.FailureRowsSQL(t, cols, outboxsql.StateFailed, &reason, "", 50)
	deep, dargs := outboxsql.FailureRowsSQL(t, cols, outboxsql.StateFailed, &reason, "900000", 50)
	retrying, rargs := outboxsql.FailureRowsSQL(t, cols, outboxsql.StateRetrying, nil, "", 50)
	sw := outboxsql.Sweep{T: t, Pending: []string{"PENDING"}}
	count, cargs, err := sw.RequeueCountSQL(outboxsql.RequeueMatch{Error: &reason})
	if err != nil {
		return err
	}
	for _, q := range []struct {
		name, sql string
		args      []any
	}{
		{"groups", groups, gargs},
		{"group_texts", outboxsql.FailureTextsSQL(t, 4), []any{100, 200, 300, 1}},
		{"rows_first_page", first, fargs},
		{"rows_deep_page", deep, dargs},
		{"rows_retrying", retrying, rargs},
		{"requeue_dry_run", count, cargs},
	} {
		plan, err := explain(ctx, db, q.sql, q.args)
		if err != nil {
			return fmt.Errorf("EXPLAIN %s: %w", q.name, err)
		}
		var times []time.Duration
		var n int
		for range 5 {
			began := time.Now()
			rows, err := db.QueryContext(ctx, q.sql, q.args...)
			if err != nil {
				return fmt.Errorf("%s: %w", q.name, err)
			}
			n = 0
			for rows.Next() {
				n++
			}
			rows.Close()
			times = append(times, time.Since(began))
		}
		slices.Sort(times)
		med := times[len(times)/2]
		progress("  %s%s: median %s of 5 (%d result rows)\n    %s\n%s", tag, q.name, med.Round(10*time.Microsecond), n, q.sql, plan)
		rep.add("console_"+tag+q.name+"_ms", float64(med.Microseconds())/1000, "ms")
	}
	return nil
}

// explain is the query's EXPLAIN, one indented line a row.
func explain(ctx context.Context, db *sql.DB, q string, args []any) (string, error) {
	rows, err := db.QueryContext(ctx, "EXPLAIN "+q, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	b.WriteString("    " + strings.Join(cols, " | ") + "\n")
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return "", err
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = v.String
			if !v.Valid {
				parts[i] = "NULL"
			}
		}
		b.WriteString("    " + strings.Join(parts, " | ") + "\n")
	}
	return b.String(), rows.Err()
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

const (
	// reconcileSecondsTarget and reconcileRSSTarget are the reconcile step's
	// targets for 1,000,000 rows.
	reconcileSecondsTarget = 30
	reconcileRSSTarget     = 128
	// reconcileBatch rows per INSERT ... SELECT.
	reconcileBatch = 100000
)

// reconcileStep measures `binlog-relay reconcile` over -reconcile-rows SENT
// outbox rows and a pkg/inbox table holding each of them as processed: its
// wall time and peak RSS. Reconcile reads only the replica, so the rows are
// written there alone, with sql_log_bin=0: the database and its tables are
// created on the primary (replicated), the rows go straight into the
// replica's copy and never into a binary log, so loading them costs seconds
// and leaves nothing to purge. Dropping the database on the primary at the
// end drops the replica's copy too.
func reconcileStep(ctx context.Context, e *env, rep *report) error {
	n := e.o.reconcileRows
	db := e.dbName + "_rc"
	progress("reconcile: %d outbox rows against an inbox of as many, loaded on the replica", n)
	if err := createReconcileDB(ctx, e, db); err != nil {
		return err
	}
	defer dropReconcileDB(e, db)
	if err := loadReplicaRows(ctx, e, db, n, "rc-", "bench.ex", true); err != nil {
		return err
	}
	if err := waitMachineIdle(ctx, 30*time.Second); err != nil {
		return err
	}
	name := fmt.Sprintf("bench-rc-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	e.relayNames = append(e.relayNames, name) // its result key is removed with the others
	secs, rss, out, err := runReconcile(ctx, e, name, db)
	if err != nil {
		return err
	}
	if err := checkReconcileReport(out, n); err != nil {
		return err
	}
	progress("  reconciled in %.1fs, peak RSS %.1f MB", secs, rss)
	label := sizeLabel(n)
	rep.add("reconcile_"+label+"_rows_seconds", secs, "s")
	rep.add("reconcile_"+label+"_rows_peak_rss_mb", rss, "MB")
	return nil
}

func createReconcileDB(ctx context.Context, e *env, db string) error {
	if _, err := e.primary.ExecContext(ctx, "CREATE DATABASE "+db); err != nil {
		return fmt.Errorf("creating %s: %w", db, err)
	}
	conn, err := openDB(e.o.primaryDSN, db, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, f := range []string{"producer_message.sql", "consumer_message.sql"} {
		ddl, err := os.ReadFile(filepath.Join(repoRoot(), "schema", f))
		if err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, stripComments(string(ddl))); err != nil {
			return fmt.Errorf("creating %s in %s: %w", f, db, err)
		}
	}
	pos, err := e.primaryPos(ctx)
	if err != nil {
		return err
	}
	if err := waitApplied(ctx, e.replica, pos, 60*time.Second); err != nil {
		return fmt.Errorf("the replica did not create %s: %w", db, err)
	}
	return nil
}

// loadReplicaRows writes n outbox rows (SENT an hour ago, message ids
// prefix+N, to exchange) and, with inbox, n inbox rows (SUCCESS) on the
// replica, in INSERT ... SELECT statements over a derived table of numbers,
// outside the binary log. The reconcile and replay steps read them there.
func loadReplicaRows(ctx context.Context, e *env, db string, n int, prefix, exchange string, inbox bool) error {
	conn, err := openDB(e.o.replicaDSN, db, map[string]string{"sql_log_bin": "0"})
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetMaxOpenConns(1)
	digit := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	numbers := fmt.Sprintf("(SELECT a.d + 10*b.d + 100*c.d + 1000*d.d + 10000*e.d AS n FROM %[1]s a, %[1]s b, %[1]s c, %[1]s d, %[1]s e) s", digit)
	began := time.Now()
	for base := 0; base < n; base += reconcileBatch {
		left := min(reconcileBatch, n-base)
		if _, err := conn.ExecContext(ctx, `INSERT INTO producer_message (id, message_id, exchange, routing_key, content, status, create_time, update_time, version)
			SELECT ? + n + 1, CONCAT(?, ? + n), ?, 'order.created', REPEAT('x', ?), 'SENT',
				NOW(3) - INTERVAL 1 HOUR, NOW(3) - INTERVAL 1 HOUR, 1 FROM `+numbers+` WHERE n < ?`,
			base, prefix, base, exchange, e.o.payload, left); err != nil {
			return fmt.Errorf("loading rows on the replica: %w", err)
		}
		if !inbox {
			continue
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO consumer_message (consumer, message_id, status, content, exchange, routing_key, first_consume_time, last_consume_time, success_time)
			SELECT 'bench', CONCAT(?, ? + n), 'SUCCESS', REPEAT('x', ?), ?, 'order.created',
				NOW(3) - INTERVAL 1 HOUR, NOW(3) - INTERVAL 1 HOUR, NOW(3) - INTERVAL 1 HOUR FROM `+numbers+` WHERE n < ?`,
			prefix, base, e.o.payload, exchange, left); err != nil {
			return fmt.Errorf("loading rows on the replica: %w", err)
		}
	}
	what := fmt.Sprint(n)
	if inbox {
		what = fmt.Sprintf("%d + %d", n, n)
	}
	progress("  loaded %s rows in %s", what, time.Since(began).Round(100*time.Millisecond))
	return nil
}

// dropReconcileDB drops the database on the primary (and so on the
// replica) and purges the binary logs the step left.
func dropReconcileDB(e *env, db string) {
	if e.o.keep {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := e.primary.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		progress("dropping %s: %v", db, err)
	}
	e.purgeBinlogs()
}

// runReconcile runs `binlog-relay reconcile` as a child process, the way
// cron would, and returns its wall time, its peak RSS (VmHWM) and its JSON
// report.
func runReconcile(ctx context.Context, e *env, name, db string) (float64, float64, []byte, error) {
	rh, rp, ru, rpw, err := hostPort(e.o.replicaDSN)
	if err != nil {
		return 0, 0, nil, err
	}
	yaml, err := e.relayConfig(name, true)
	if err != nil {
		return 0, 0, nil, err
	}
	yaml = strings.Replace(yaml, "schema: "+e.dbName, "schema: "+db, 1)
	yaml += fmt.Sprintf("reconcile:\n  consumers:\n    - {name: bench, consumer: bench, schema: %s, mysql: {host: %q, port: %d, user: %q, password: \"${BENCH_SOURCE_PASSWORD:-}\"}}\n",
		db, rh, rp, ru)
	cfg := filepath.Join(e.tmp, name+".yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return 0, 0, nil, err
	}
	_, _, _, ppw, _ := hostPort(e.o.primaryDSN)
	cmd := exec.CommandContext(ctx, e.relayBin, "reconcile", "--config", cfg, "--format", "json")
	cmd.Env = append(os.Environ(), "BENCH_SOURCE_PASSWORD="+rpw, "BENCH_PRIMARY_PASSWORD="+ppw, "BENCH_AMQP_URL="+e.o.amqpURL)
	var stdout bytes.Buffer
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, nil, err
	}
	peak := watchPeakRSS(cmd.Process.Pid)
	err = cmd.Wait()
	secs := time.Since(began).Seconds()
	rss := mb(peak())
	if ee := (*exec.ExitError)(nil); err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
		return 0, 0, nil, fmt.Errorf("binlog-relay reconcile: %v\n%s", err, tail(stderr.String(), 2000))
	}
	return secs, rss, stdout.Bytes(), nil
}

// watchPeakRSS samples a child's VmHWM every 10 ms until it exits; the
// returned func stops the sampling and gives the highest value read. Not
// the child's rusage: Go starts a child with vfork, so the kernel's
// ru_maxrss counts the parent's resident set at that moment, and the bench
// itself holds more than the reconcile run. VmHWM is a high-water mark,
// so only growth in the child's last 10 ms could be missed.
func watchPeakRSS(pid int) func() int64 {
	var peak atomic.Int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if v := peakRSS(pid); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		<-stopped
		return peak.Load()
	}
}

// checkReconcileReport makes sure the run compared every row and found
// nothing: a fast run that skipped the work would be no figure at all.
func checkReconcileReport(out []byte, n int) error {
	var r struct {
		Differences int64 `json:"differences"`
		Tables      []struct {
			Rows      int64 `json:"rows"`
			Consumers []struct {
				Expected  int64 `json:"expected"`
				Processed int64 `json:"processed"`
			} `json:"consumers"`
		} `json:"tables"`
		Consumers []struct {
			InboxRows int64 `json:"inbox_rows"`
		} `json:"consumers"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("reading the reconcile report: %w\n%s", err, tail(string(out), 2000))
	}
	want := int64(n)
	if r.Differences != 0 || len(r.Tables) != 1 || r.Tables[0].Rows != want || len(r.Tables[0].Consumers) != 1 ||
		r.Tables[0].Consumers[0].Processed != want || len(r.Consumers) != 1 || r.Consumers[0].InboxRows != want {
		return fmt.Errorf("the reconcile report does not cover the %d rows with no difference:\n%s", n, tail(string(out), 3000))
	}
	return nil
}

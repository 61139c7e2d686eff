package testenv

import (
	"github.com/binlog-relay/binlog-relay/internal/showrow"

	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// binlogGrace is how old a binary log file must be before PurgeBinlogs
// removes it. Other tests run against the same servers at the same time: a
// relay of theirs that is between two connections resumes from a checkpoint
// at most a few seconds old, and must find that position still there.
const binlogGrace = 2 * time.Minute

// PurgeBinlogs registers a cleanup, for a test that writes a lot, that
// removes the binary logs left on the stack's primary and replicas once the
// test is over (the stack keeps its data in memory; a few long tests fill
// gigabytes). Call it first in the test, so it runs after the test's other
// cleanups (its relays are stopped by then).
//
// The rules are make bench's (bench/limits.go, purgeBinlogs): the replicas
// are waited for first, and the primary loses only files every replica has
// applied; when a replica cannot be read or has not caught up, the
// primary's files are kept and the test log says why. The replicas, which
// the stack replicates nothing from, rotate (FLUSH LOCAL BINARY LOGS: no
// event of their own, which gtid_strict_mode would refuse on the next
// replicated one) and then lose their files older than binlogGrace, as does
// the primary. The server never removes the file in use, nor one a
// connected reader still reads.
func PurgeBinlogs(t testing.TB) {
	t.Helper()
	t.Cleanup(func() { PurgeBinlogsNow(t.Logf) })
}

// PurgeBinlogsNow is PurgeBinlogs' cleanup, for a TestMain to run once its
// package's tests are over (the last purge of a run). logf reports each
// server.
func PurgeBinlogsNow(logf func(format string, args ...any)) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	purgeBinlogs(ctx, logf)
}

func purgeBinlogs(ctx context.Context, logf func(format string, args ...any)) {
	replicas := map[string]string{"replica": ReplicaDSN, "replica2": Replica2DSN}
	primary, err := openPlain(PrimaryDSN)
	if err != nil {
		logf("binary logs on primary kept: %v", err)
		return
	}
	defer primary.Close()
	if why := primaryPurgeBlocked(ctx, primary, replicas); why != "" {
		logf("binary logs on primary kept: %s", why)
	} else {
		purgeOld(ctx, logf, "primary", primary, false)
	}
	for _, name := range []string{"replica", "replica2"} {
		db, err := openPlain(replicas[name])
		if err != nil {
			logf("binary logs on %s kept: %v", name, err)
			continue
		}
		purgeOld(ctx, logf, name, db, true)
		_ = db.Close()
	}
}

// primaryPurgeBlocked says why the primary's binary logs must stay, or ""
// when every replica has applied everything up to the primary's current
// file (so no file before it is needed by a replica).
func primaryPurgeBlocked(ctx context.Context, primary *sql.DB, replicas map[string]string) string {
	pos, err := Current.GTIDPos(ctx, primary)
	if err != nil {
		return fmt.Sprintf("reading its GTID position: %v", err)
	}
	current, err := currentBinlog(ctx, primary)
	if err != nil {
		return err.Error()
	}
	for _, name := range []string{"replica", "replica2"} {
		db, err := openPlain(replicas[name])
		if err != nil {
			return fmt.Sprintf("%s cannot be read: %v", name, err)
		}
		why := replicaBehind(ctx, db, name, pos, current)
		_ = db.Close()
		if why != "" {
			return why
		}
	}
	return ""
}

// replicaBehind waits up to 30 s for the replica to apply pos, then checks
// that the primary file it applies from is current or later.
func replicaBehind(ctx context.Context, db *sql.DB, name, pos, current string) string {
	if err := Current.WaitApplied(ctx, db, pos, 30*time.Second); err != nil {
		return fmt.Sprintf("%s has not applied %s within 30 s (replication stopped or paused?): %v", name, pos, err)
	}
	row, err := Current.ReplicaStatus(ctx, db)
	if err != nil {
		return fmt.Sprintf("%s: %v", name, err)
	}
	applied := row["Relay_Master_Log_File"]
	if applied == "" || applied < current {
		return fmt.Sprintf("%s applies from %q, before the primary's current %s", name, applied, current)
	}
	return ""
}

// purgeOld rotates (replicas) and removes the files older than binlogGrace.
func purgeOld(ctx context.Context, logf func(format string, args ...any), name string, db *sql.DB, rotate bool) {
	before, bytesBefore := binlogUsage(ctx, db)
	if rotate {
		if _, err := db.ExecContext(ctx, "FLUSH LOCAL BINARY LOGS"); err != nil {
			logf("binary logs on %s kept: rotating: %v", name, err)
			return
		}
	}
	q := fmt.Sprintf("PURGE BINARY LOGS BEFORE NOW() - INTERVAL %d SECOND", int(binlogGrace.Seconds()))
	if _, err := db.ExecContext(ctx, q); err != nil {
		logf("binary logs on %s kept: %v", name, err)
		return
	}
	after, bytesAfter := binlogUsage(ctx, db)
	logf("binary logs on %s: %d files (%d MiB) before, %d (%d MiB) after purging those older than %s",
		name, before, bytesBefore>>20, after, bytesAfter>>20, binlogGrace)
}

// binlogUsage counts a server's binary log files and their bytes.
func binlogUsage(ctx context.Context, db *sql.DB) (files int, bytes int64) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return 0, 0
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		var name string
		var size int64
		dest := []any{&name, &size}
		for range len(cols) - 2 { // newer servers add an Encrypted column
			dest = append(dest, new(sql.RawBytes))
		}
		if rows.Scan(dest...) == nil {
			files, bytes = files+1, bytes+size
		}
	}
	return files, bytes
}

func currentBinlog(ctx context.Context, db *sql.DB) (string, error) {
	row, err := showrow.First(ctx, db, Current.BinlogStatusSQL())
	if err != nil {
		return "", fmt.Errorf("%s: %w", Current.BinlogStatusSQL(), err)
	}
	if row["File"] == "" {
		return "", fmt.Errorf("binary logging is off")
	}
	return row["File"], nil
}

// openPlain opens a server without failing the test (a cleanup reports, it
// does not fail a test that passed).
func openPlain(dsn string) (*sql.DB, error) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	c.Timeout = 5 * time.Second
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

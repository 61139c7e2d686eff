package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/showrow"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// The limits steps: the relay's memory while it drains large payloads, and
// its drain rate when every row goes to an exchange that does not exist.

const (
	// payloadBytes per row, -payload-rows (1,000) of them: 1 GB through a
	// relay whose byte budget (relay.max_inflight_bytes) is 64 MiB.
	payloadBytes = 1 << 20
	// payloadRSSTarget is the most the relay may hold while it drains them.
	payloadRSSTarget = 256
	// missingTarget is the least share of the normal drain rate a drain to
	// a missing exchange must keep.
	missingTarget = 50
)

// bigTable is the large-payload step's own table: it is dropped after the
// step, which costs the binlog one statement where deleting 1 GB of rows
// would log every row image again.
const bigTable = "big_message"

// payloadStep drains payloadRows rows of payloadBytes from the binlog (the
// relay saved a checkpoint first, as in the backlog drain) and reports the
// relay's peak RSS meanwhile.
func payloadStep(ctx context.Context, e *env, rep *report) error {
	payloadRows := fitPayloadRows(e.o.payloadRows)
	progress("memory: a backlog of %d rows of %d KiB", payloadRows, payloadBytes>>10)
	ddl, err := os.ReadFile(filepath.Join(repoRoot(), "schema", "producer_message.sql"))
	if err != nil {
		return err
	}
	create := strings.Replace(stripComments(string(ddl)), "producer_message", bigTable, 1)
	if _, err := e.primary.ExecContext(ctx, create); err != nil {
		return fmt.Errorf("creating %s: %w", bigTable, err)
	}
	defer func() {
		if _, err := e.primary.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+bigTable); err != nil {
			progress("dropping %s: %v", bigTable, err)
		}
	}()
	saved := e.o.tableYAML
	e.o.tableYAML = "{preset: producer-message, name: " + bigTable + "}"
	defer func() { e.o.tableYAML = saved }()
	spec := rowSpec{table: bigTable, exchange: e.topo.exchange, size: payloadBytes}

	name := fmt.Sprintf("bench-payload-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	if err := e.checkpointAt(ctx, name, spec); err != nil {
		return err
	}
	prefix := e.nextPrefix("big")
	// Without the statements' text in the binlog (bulkParams).
	bulk, err := openDB(e.o.primaryDSN, e.dbName, bulkParams())
	if err != nil {
		return err
	}
	defer bulk.Close()
	// Ten rows (10 MiB) per statement: under the stack's max_allowed_packet.
	if err := insertRowsInto(ctx, bulk, spec, prefix, payloadRows, 10, "PENDING"); err != nil {
		return err
	}
	if err := e.quiesce(ctx); err != nil {
		return err
	}
	s := e.consumer.expect(prefix, payloadRows, false)
	start := time.Now()
	p, err := e.startRelay(ctx, name, true)
	if err != nil {
		return err
	}
	defer p.kill()
	if err := s.wait(ctx, 10*time.Minute); err != nil {
		return err
	}
	_, last := s.span()
	rss := p.peakRSS()
	if err := p.stop(); err != nil {
		return err
	}
	rate := float64(payloadRows) / last.Sub(start).Seconds()
	verdict := "within"
	if mb(rss) > payloadRSSTarget {
		verdict = "OVER"
	}
	progress("  drained in %s (%.0f msg/s), relay peak RSS %.1f MB: %s the %d MB target", last.Sub(start).Round(time.Millisecond), rate, mb(rss), verdict, payloadRSSTarget)
	rep.add("payload_1mib_rows", float64(payloadRows), "rows")
	rep.add("rss_relay_payload_1mib_drain_peak_mb", mb(rss), "MB")
	rep.add("drain_relay_payload_1mib_msgs_per_s", rate, "msg/s")
	return nil
}

// payloadMemPerRow is what one payload row costs the stack's memory (its
// data lives in /dev/shm): on each of the three MariaDB servers the row's
// insert and the SENT mark's before and after images in the binary log
// (binlog_row_image=FULL), the row itself, and on the replicas the relay
// log on its way through: about 13 times the payload in all.
const payloadMemPerRow = 13 * payloadBytes

// fitPayloadRows lowers rows, saying so, when the machine's available
// memory cannot hold what the step writes (with 3 GiB to spare): a
// server killed for memory would end the whole run.
func fitPayloadRows(rows int) int {
	avail := memAvailable()
	if avail <= 0 {
		return rows
	}
	fit := int((avail - 3<<30) / payloadMemPerRow)
	if fit >= rows {
		return rows
	}
	fit = max(fit, 10)
	progress("memory: %d MiB available holds the binary logs of %d payload rows, not %d: running with %d", avail>>20, fit, rows, fit)
	return fit
}

// memAvailable is MemAvailable from /proc/meminfo in bytes (0 when unknown).
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			return kib << 10
		}
	}
	return 0
}

// missingExchangeStep drains -backlog rows normally, then -backlog rows
// whose exchange does not exist, in the same run: each of the latter is
// settled when the relay has recorded its failure (PENDING, retry_count 1,
// the reason in error_msg). It reports both rates, their ratio, and how
// many "publish failed" lines the relay wrote for them.
func missingExchangeStep(ctx context.Context, e *env, rep *report) error {
	progress("missing exchange: binlog-relay drain of %d rows to an existing exchange", e.o.backlog)
	normal, err := drainRelay(ctx, e)
	if err != nil {
		return fmt.Errorf("normal drain: %w", err)
	}
	progress("  normal: %.0f msg/s", normal.rate)

	missing := e.topo.exchange + ".missing"
	n := e.o.backlog
	progress("missing exchange: binlog-relay drain of %d rows to %s", n, missing)
	name := fmt.Sprintf("bench-missing-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	if err := e.checkpointAt(ctx, name, e.outboxRows()); err != nil {
		return err
	}
	prefix := e.nextPrefix("mx")
	if err := insertRowsInto(ctx, e.primary, rowSpec{table: "producer_message", exchange: missing, size: e.o.payload},
		prefix, n, 1000, "PENDING"); err != nil {
		return err
	}
	if err := e.quiesce(ctx); err != nil {
		return err
	}
	start := time.Now()
	p, err := e.startRelay(ctx, name, true)
	if err != nil {
		return err
	}
	defer p.kill()
	if err := waitRetried(ctx, e, prefix, n, 10*time.Minute); err != nil {
		return err
	}
	elapsed := time.Since(start)
	if err := p.stop(); err != nil {
		return err
	}
	lines := strings.Count(p.logText(), `"publish failed`)
	rate := float64(n) / elapsed.Seconds()
	pct := 100 * rate / normal.rate
	verdict := "meets"
	if pct < missingTarget {
		verdict = "MISSES"
	}
	progress("  missing exchange: %.0f msg/s, %.0f%% of the normal drain (%s the %d%% target), %d \"publish failed\" log lines",
		rate, pct, verdict, missingTarget, lines)
	rep.add("drain_relay_normal_msgs_per_s", normal.rate, "msg/s")
	rep.add("drain_relay_missing_exchange_msgs_per_s", rate, "msg/s")
	rep.add("drain_relay_missing_exchange_vs_normal_pct", pct, "%")
	rep.add("drain_relay_missing_exchange_warn_lines", float64(lines), "lines")
	return e.reset(ctx)
}

// waitRetried waits until the n rows with message ids prefix0..prefix<n-1>
// have their failure recorded. The relay records failures in commit order,
// so it watches the last row (one primary-key lookup per poll, not a scan
// that would load the primary during the measurement), then checks them all
// once.
func waitRetried(ctx context.Context, e *env, prefix string, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	last := fmt.Sprintf("%s%d", prefix, n-1)
	for {
		var retries int
		if err := e.primary.QueryRowContext(ctx, "SELECT retry_count FROM producer_message WHERE message_id = ?", last).Scan(&retries); err != nil {
			return err
		}
		if retries > 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the failure of %s was not recorded after %s", last, within)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	var done int
	if err := e.primary.QueryRowContext(ctx, "SELECT COUNT(*) FROM producer_message WHERE message_id LIKE ? AND retry_count > 0 AND status = 'PENDING'",
		prefix+"%").Scan(&done); err != nil {
		return err
	}
	if done != n {
		return fmt.Errorf("%d of %d rows to the missing exchange recorded as failed (PENDING with a retry)", done, n)
	}
	return nil
}

// purgeBinlogs removes, on every server the run wrote to (the primary, and
// the replicas that log what they apply), the binary logs the run left: the
// large-payload step alone writes gigabytes of row images, and the stack
// keeps its data in memory. On the primary it purges only up to the oldest
// file a replica has not applied yet (a replica that reconnects by GTID asks
// for its applied position, and a paused replica holds no file open), and
// not at all when a replica cannot be read. On the replicas, which the stack
// replicates nothing from, it rotates and purges up to the new file; the
// server keeps a file a connected reader (a running relay) still needs.
func (e *env) purgeBinlogs() {
	ctx, cancel := context.WithTimeout(context.Background(), 330*time.Second)
	defer cancel()
	if e.primary != nil {
		pos, _ := e.primaryPos(ctx)
		e.extras.catchUp(ctx, pos, 300*time.Second)
	}
	// Every replica of the primary must be among these: one left out could
	// lose the files it has not fetched yet.
	replicas := append([]string{e.o.replicaDSN}, e.o.extraReplicas...)
	oldest := ""
	for _, dsn := range replicas {
		db, err := openDB(dsn, "", nil)
		if err == nil {
			var f string
			f, err = appliedSourceFile(ctx, db)
			if err == nil && (oldest == "" || f < oldest) {
				oldest = f
			}
			_ = db.Close()
		}
		if err != nil {
			progress("binary logs on the primary kept: replica %s: %v", redactDSN(dsn), err)
			oldest = ""
			break
		}
	}
	if oldest != "" {
		purgeTo(ctx, "primary", e.o.primaryDSN, oldest, false)
	}
	for i, dsn := range replicas {
		label := "replica"
		if i > 0 {
			label = "extra replica"
		}
		purgeTo(ctx, label, dsn, "", true)
	}
}

// purgeTo purges a server's binary logs before file, or (rotate) rotates
// and purges up to the new current file.
func purgeTo(ctx context.Context, label, dsn, file string, rotate bool) {
	db, err := openDB(dsn, "", nil)
	if err != nil {
		progress("purging binary logs on %s %s: %v", label, redactDSN(dsn), err)
		return
	}
	defer db.Close()
	before := binlogCount(ctx, db)
	if rotate {
		// LOCAL: not written to the binlog, so a replica gets no local
		// event of its own.
		if _, err = db.ExecContext(ctx, "FLUSH LOCAL BINARY LOGS"); err == nil {
			file, err = masterFile(ctx, db)
		}
	}
	if err == nil {
		_, err = db.ExecContext(ctx, "PURGE BINARY LOGS TO '"+strings.ReplaceAll(file, "'", "")+"'")
	}
	if err != nil {
		progress("purging binary logs on %s %s: %v", label, redactDSN(dsn), err)
		return
	}
	progress("binary logs on %s %s: %d files before, %d after the purge (to %s)", label, redactDSN(dsn), before, binlogCount(ctx, db), file)
}

// appliedSourceFile is the primary's binary log file holding the last event
// a replica applied (Relay_Master_Log_File, MySQL's Relay_Source_Log_File):
// the oldest it may ask for again.
func appliedSourceFile(ctx context.Context, db *sql.DB) (string, error) {
	row, err := testenv.Current.ReplicaStatus(ctx, db)
	if err != nil {
		return "", fmt.Errorf("not a replica: %w", err)
	}
	f, ok := row["Relay_Master_Log_File"]
	switch {
	case !ok:
		return "", fmt.Errorf("the replica status has no Relay_Master_Log_File")
	case f == "":
		return "", fmt.Errorf("no applied position")
	}
	return f, nil
}

type execQuerier interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}

// masterFile is the server's current binary log file (the File column of
// SHOW MASTER STATUS, MySQL 9's SHOW BINARY LOG STATUS, whose other columns
// differ between versions).
func masterFile(ctx context.Context, db execQuerier) (string, error) {
	row, err := showrow.First(ctx, db, testenv.Current.BinlogStatusSQL())
	if err != nil {
		return "", fmt.Errorf("binary logging is off: %w", err)
	}
	return row["File"], nil
}

// binlogCount is how many binary log files the server keeps (-1 unknown).
func binlogCount(ctx context.Context, db execQuerier) int {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return -1
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n
}

package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// marksRows is how many rows the marks step marks per row image, in
// statements of marksBatch (the relay's relay.batch_size).
const (
	marksRows  = 20000
	marksBatch = 1000
)

// marksStep measures what the SENT marks cost, per 1,000 rows, with each
// row image (relay.mark_row_image: full, then minimal): the primary's CPU
// and the bytes its binlog grows by, the replica's CPU, the bytes its
// binlog grows by and the time it takes to apply them, and the CPU of a
// relay reading those UPDATEs from the replica's binlog (its own marks, to
// decode and pass over). The rows are written PENDING and replicated
// first; a relay is started after them (so it publishes none of them);
// then the bench marks them exactly as the relay does (internal/rowstatus,
// 1,000 ids a statement, matched by message id).
func marksStep(ctx context.Context, e *env, rep *report) error {
	for _, image := range []string{rowstatus.ImageFull, rowstatus.ImageMinimal} {
		if err := marksRun(ctx, e, rep, image); err != nil {
			return fmt.Errorf("%s images: %w", image, err)
		}
	}
	return nil
}

func marksRun(ctx context.Context, e *env, rep *report, image string) error {
	progress("marks: %d PENDING rows marked SENT with %s row images, %d a statement", marksRows, image, marksBatch)
	prefix := e.nextPrefix("mk")
	if err := e.insertRows(ctx, e.primary, prefix, marksRows, 2000, "PENDING"); err != nil {
		return err
	}
	if err := e.quiesce(ctx); err != nil {
		return err
	}
	name := fmt.Sprintf("bench-marks-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	p, err := e.startRelay(ctx, name, true)
	if err != nil {
		return err
	}
	defer func() { p.kill() }()
	db, err := openDB(e.o.primaryDSN, e.dbName, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	t, err := outbox.Preset("producer-message")
	if err != nil {
		return err
	}
	t.Schema, t.Name = e.dbName, "producer_message"
	w := rowstatus.NewWriter(db, rowstatus.Retry{})
	w.Image = image
	defer w.Close()
	if got, err := w.MarkImage(ctx); got != image {
		return fmt.Errorf("the marks' session logs %s images, not %s: %v", got, image, err)
	}
	batches, err := markBatches(ctx, db, prefix)
	if err != nil {
		return err
	}
	if err := waitMachineIdle(ctx, 30*time.Second); err != nil {
		return err
	}
	pBytes0, err := binlogBytes(ctx, e.primary.DB)
	if err != nil {
		return err
	}
	rBytes0, err := binlogBytes(ctx, e.replica)
	if err != nil {
		return err
	}
	procs := e.stackProcs(ctx)
	before, relay0 := sampleCPU(procs), p.cpu()
	start := time.Now()
	marked := int64(0)
	for _, m := range batches {
		n, err := w.MarkSent(ctx, &t, m)
		if err != nil {
			return err
		}
		marked += n
	}
	if marked != marksRows {
		return fmt.Errorf("marked %d rows, want %d", marked, marksRows)
	}
	primaryDone := time.Since(start)
	pos, err := e.primaryPos(ctx)
	if err != nil {
		return err
	}
	if err := waitApplied(ctx, e.replica, pos, 5*time.Minute); err != nil {
		return err
	}
	applied := time.Since(start)
	// The relay reads what the replica logs as it logs it; give it a moment
	// past the replica's last commit.
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	after, relay1 := sampleCPU(procs), p.cpu()
	pBytes1, err := binlogBytes(ctx, e.primary.DB)
	if err != nil {
		return err
	}
	rBytes1, err := binlogBytes(ctx, e.replica)
	if err != nil {
		return err
	}
	use := cpuBetween(before, after)
	k := "marks_" + image + "_"
	rep.add(k+"primary_cpu_ms_per_1k_rows", per1kDur(use.by["primary"], marksRows), "ms")
	rep.add(k+"primary_binlog_bytes_per_1k_rows", per1k(pBytes1-pBytes0, marksRows), "B")
	rep.add(k+"primary_ms_per_1k_rows", per1kDur(primaryDone, marksRows), "ms")
	rep.add(k+"replica_cpu_ms_per_1k_rows", per1kDur(use.by["replica"], marksRows), "ms")
	rep.add(k+"replica_binlog_bytes_per_1k_rows", per1k(rBytes1-rBytes0, marksRows), "B")
	rep.add(k+"replica_applied_ms_per_1k_rows", per1kDur(applied, marksRows), "ms")
	rep.add(k+"relay_cpu_ms_per_1k_rows", per1kDur(relay1-relay0, marksRows), "ms")
	progress("  primary %s, replica applied after %s; primary binlog +%d B, replica binlog +%d B",
		primaryDone.Round(time.Millisecond), applied.Round(time.Millisecond), pBytes1-pBytes0, rBytes1-rBytes0)
	if err := p.stop(); err != nil {
		return err
	}
	return e.reset(ctx)
}

// markBatches reads the run's rows (prefix) as the relay's marks name
// them: ids and message ids, marksBatch a mark.
func markBatches(ctx context.Context, db *sql.DB, prefix string) ([]rowstatus.Marks, error) {
	rows, err := db.QueryContext(ctx, "SELECT id, message_id FROM producer_message WHERE message_id LIKE ? ORDER BY id", prefix+"%")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []rowstatus.Marks
	var cur rowstatus.Marks
	for rows.Next() {
		var id int64
		var msg string
		if err := rows.Scan(&id, &msg); err != nil {
			return nil, err
		}
		cur.Add(id, msg)
		if len(cur.IDs) == marksBatch {
			out, cur = append(out, cur), rowstatus.Marks{}
		}
	}
	if len(cur.IDs) > 0 {
		out = append(out, cur)
	}
	return out, rows.Err()
}

// binlogBytes is the size of every binary log the server holds (SHOW
// BINARY LOGS): the growth between two reads is what it logged, rotations
// included (the bench purges only at its end).
func binlogBytes(ctx context.Context, db *sql.DB) (int64, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return 0, fmt.Errorf("SHOW BINARY LOGS: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	var total int64
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return 0, err
		}
		var n int64
		for i, c := range cols {
			if strings.EqualFold(c, "File_size") {
				fmt.Sscan(string(vals[i]), &n)
			}
		}
		total += n
	}
	return total, rows.Err()
}

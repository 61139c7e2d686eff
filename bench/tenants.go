package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/relay"
)

// tenantsStep is issue 38's figures for one relay over many outbox tables
// (docs/operating.md, "Many tables: what an interval costs"): -tenants
// schemas, each with the seed table, matched by one pattern entry. It
// measures the relay's start-up (process start to streaming and connected
// to the broker) and RSS then; the statements it sends the replica and the
// primary per sweep interval when idle; the drain of -tenants-rows rows
// spread over every table against the same rows in one table; and the p99
// commit-to-delivery latency of a quiet tenant writing -tenants-quiet-rate
// rows/s, alone and while a noisy tenant commits one -tenants-noisy-tx-row
// transaction. The schemas are dropped at the end.
func tenantsStep(ctx context.Context, e *env, rep *report) error {
	tn := &tenants{e: e, prefix: e.dbName + "_t"}
	defer tn.drop()
	if err := tn.create(ctx); err != nil {
		return err
	}
	savedTable, savedStart, savedRelay := e.tableOverride, e.startWithin, e.relaySection
	e.tableOverride = fmt.Sprintf(`{preset: producer-message, schema: "%s*", name: producer_message}`, tn.prefix)
	e.startWithin, e.relaySection = 10*time.Minute, ""
	defer func() { e.tableOverride, e.startWithin, e.relaySection = savedTable, savedStart, savedRelay }()
	rep.add("tenants_tables", float64(e.o.tenants), "tables")

	name := fmt.Sprintf("bench-tenants-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	if err := tn.startupAndIdle(ctx, rep, name); err != nil {
		return err
	}
	spread, spreadPer, err := tn.drain(ctx, name, true)
	if err != nil {
		return fmt.Errorf("drain over %d tables: %w", e.o.tenants, err)
	}
	// The same spread with the marks of a batch's tables one after another
	// (relay.mark_sessions 1, before they ran side by side).
	e.relaySection = "mark_sessions: 1"
	serial, _, err := tn.drain(ctx, name, true)
	e.relaySection = ""
	if err != nil {
		return fmt.Errorf("drain over %d tables, one marks session: %w", e.o.tenants, err)
	}
	// The same spread with room for more kept marks (a larger crash replay).
	e.relaySection = fmt.Sprintf("max_unmarked: %d", tenantsRoomyUnmarked)
	roomy, roomyPer, err := tn.drain(ctx, name, true)
	e.relaySection = ""
	if err != nil {
		return fmt.Errorf("drain over %d tables, max_unmarked %d: %w", e.o.tenants, tenantsRoomyUnmarked, err)
	}
	one, onePer, err := tn.drain(ctx, name, false)
	if err != nil {
		return fmt.Errorf("drain into one table: %w", err)
	}
	progress("tenants: drain of %d rows: %.0f msg/s over %d tables (%.1f rows a SENT statement; %.0f msg/s with one marks session), %.0f msg/s into one (%.1f rows a statement)",
		e.o.tenantsRows, spread, e.o.tenants, spreadPer, serial, one, onePer)
	rep.add("tenants_drain_spread_msgs_per_s", spread, "msg/s")
	rep.add("tenants_drain_spread_rows_per_mark_statement", spreadPer, "rows")
	rep.add("tenants_drain_spread_one_marks_session_msgs_per_s", serial, "msg/s")
	progress("tenants: the spread drain with relay.max_unmarked %d: %.0f msg/s (%.1f rows a statement)", tenantsRoomyUnmarked, roomy, roomyPer)
	rep.add("tenants_drain_spread_max_unmarked_32768_msgs_per_s", roomy, "msg/s")
	rep.add("tenants_drain_spread_max_unmarked_32768_rows_per_mark_statement", roomyPer, "rows")
	rep.add("tenants_drain_one_table_msgs_per_s", one, "msg/s")
	rep.add("tenants_drain_one_table_rows_per_mark_statement", onePer, "rows")
	if one > 0 {
		rep.add("tenants_drain_spread_vs_one_pct", 100*spread/one, "%")
		rep.add("tenants_drain_spread_one_marks_session_vs_one_pct", 100*serial/one, "%")
		rep.add("tenants_drain_spread_max_unmarked_32768_vs_one_pct", 100*roomy/one, "%")
	}
	return tn.noisyNeighbour(ctx, rep, name)
}

// tenantsRoomyUnmarked is relay.max_unmarked in the third spread drain:
// eight times the default, so a batch over 1,000 tables may keep about 16
// rows of each for a later one.
const tenantsRoomyUnmarked = 32768

type tenants struct {
	e      *env
	prefix string // schema names: prefix + 4 digits
}

func (tn *tenants) schema(i int) string { return fmt.Sprintf("%s%04d", tn.prefix, i) }

func (tn *tenants) table(i int) string { return tn.schema(i) + ".producer_message" }

// create makes the schemas, each with a copy of the seed table
// (schema/producer_message.sql, in the run's database), over the pool's
// four connections, and waits until the replica has them.
func (tn *tenants) create(ctx context.Context) error {
	e, n := tn.e, tn.e.o.tenants
	start := time.Now()
	err := tn.each(ctx, n, func(i int) error {
		if _, err := e.primary.ExecContext(ctx, "CREATE DATABASE "+tn.schema(i)); err != nil {
			return fmt.Errorf("creating schema %s: %w", tn.schema(i), err)
		}
		_, err := e.primary.ExecContext(ctx, "CREATE TABLE "+tn.table(i)+" LIKE "+e.dbName+".producer_message")
		return err
	})
	if err != nil {
		return err
	}
	if err := quiesceBrief(ctx, e); err != nil {
		return err
	}
	progress("tenants: %d schemas created and replicated in %s", n, time.Since(start).Round(time.Millisecond))
	return nil
}

// each runs f for 0..n-1 on four goroutines (the primary pool's size).
func (tn *tenants) each(ctx context.Context, n int, f func(i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	next := make(chan int)
	for range 4 {
		g.Go(func() error {
			for i := range next {
				if err := f(i); err != nil {
					return err
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	return g.Wait()
}

// drop removes every schema the step made (not with -keep).
func (tn *tenants) drop() {
	if tn.e.o.keep {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	err := tn.each(ctx, tn.e.o.tenants, func(i int) error {
		_, err := tn.e.primary.ExecContext(ctx, "DROP DATABASE IF EXISTS "+tn.schema(i))
		return err
	})
	if err != nil {
		progress("tenants: dropping the schemas: %v", err)
		return
	}
	progress("tenants: %d schemas dropped in %s", tn.e.o.tenants, time.Since(start).Round(time.Millisecond))
}

// startRelay waits for a quiet replica and machine (quiesceBrief), then
// starts a relay named name (env.startRelay). start is taken between the
// two, right before the process is started: a drain timed from it counts
// neither the quiesce nor the rows' commits.
func (tn *tenants) startRelay(ctx context.Context, name string, binlogOnly bool) (p *relayProc, start time.Time, err error) {
	if err := quiesceBrief(ctx, tn.e); err != nil {
		return nil, time.Time{}, err
	}
	start = time.Now()
	p, err = tn.e.startRelay(ctx, name, binlogOnly)
	return p, start, err
}

// startupAndIdle starts a relay named name (sweeper on, as deployed), times
// its start-up, reads its RSS, then counts the statements the replica and
// the primary serve over -tenants-idle-intervals sweep intervals with
// nothing to do, and stops it (its checkpoint is where the drains start).
func (tn *tenants) startupAndIdle(ctx context.Context, rep *report, name string) error {
	e := tn.e
	p, _, err := tn.startRelay(ctx, name, false)
	if err != nil {
		return err
	}
	defer p.kill()
	startup := time.Since(p.started)
	rss := p.peakRSS()
	progress("tenants: relay over %d tables started in %s, RSS %.1f MB", e.o.tenants, startup.Round(time.Millisecond), mb(rss))
	rep.add("tenants_startup_seconds", startup.Seconds(), "s")
	rep.add("tenants_rss_startup_mb", mb(rss), "MB")

	// One interval first, so the start's own reads are not counted.
	interval := e.o.tenantsSweep
	if err := sleep(ctx, interval); err != nil {
		return err
	}
	r0, err := replicaCounters(ctx, e.replica)
	if err != nil {
		return err
	}
	p0, err := e.sampleLoad(ctx)
	if err != nil {
		return err
	}
	n := e.o.tenantsIdleIntervals
	if err := sleep(ctx, time.Duration(n)*interval); err != nil {
		return err
	}
	r1, err := replicaCounters(ctx, e.replica)
	if err != nil {
		return err
	}
	p1, err := e.sampleLoad(ctx)
	if err != nil {
		return err
	}
	// The later SHOW GLOBAL STATUS counts itself in Questions.
	rq, rs := float64(r1.questions-r0.questions-1), float64(r1.selects-r0.selects)
	pl := loadBetween(p0, p1)
	per := func(v int64) float64 { return float64(v) / float64(n) }
	progress("tenants: idle, per %s sweep interval: replica %.1f statements (%.1f SELECT), primary %.1f (proxy %.1f)",
		interval, rq/float64(n), rs/float64(n), per(pl.stmts.questions), per(pl.wire.questions))
	rep.add("tenants_idle_replica_stmts_per_interval", rq/float64(n), "stmts")
	rep.add("tenants_idle_replica_selects_per_interval", rs/float64(n), "stmts")
	rep.add("tenants_idle_primary_stmts_per_interval", per(pl.stmts.questions), "stmts")
	rep.add("tenants_idle_primary_wire_stmts_per_interval", per(pl.wire.questions), "stmts")
	return p.stop()
}

// replicaCounters reads Questions and Com_select on the replica.
func replicaCounters(ctx context.Context, db *sql.DB) (counters, error) {
	var c counters
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions','Com_select')")
	if err != nil {
		return c, fmt.Errorf("reading the replica's counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return c, err
		}
		switch strings.ToLower(name) {
		case "questions":
			c.questions = v
		case "com_select":
			c.selects = v
		}
	}
	return c, rows.Err()
}

// drain commits -tenants-rows PENDING rows while the relay named name is
// stopped, spread evenly over every table (round robin) or all into the
// first, in the same transactions either way, then
// starts it from its checkpoint (binlog path alone, as the other drains)
// and times start to last delivery. The relay's SIGTERM drain marks what
// it sent; the rows are checked SENT after it. It returns the rate and the
// rows one SENT statement carried (the UPDATEs the primary ran meanwhile,
// less the bench's own).
func (tn *tenants) drain(ctx context.Context, name string, spread bool) (rate, perStmt float64, err error) {
	e, n := tn.e, tn.e.o.tenantsRows
	prefix := e.nextPrefix("tn")
	tables := 1
	if spread {
		tables = e.o.tenants
	}
	// The same transactions either way (one INSERT of -tenants-tx-rows
	// rows each, round robin over the tables, on four connections), so the
	// two drains differ only in the tables: with one row a transaction, a
	// batch of 1,000 marks names 1,000 tables.
	per := max(e.o.tenantsTxRows, 1)
	txs := (n + per - 1) / per
	err = tn.each(ctx, txs, func(i int) error {
		k := min(per, n-i*per)
		spec := rowSpec{table: tn.table(i % tables), exchange: e.topo.exchange, size: e.o.payload}
		return insertRowsInto(ctx, e.primary, spec, fmt.Sprintf("%s%d-", prefix, i), k, k, "PENDING")
	})
	if err != nil {
		return 0, 0, err
	}
	before, err := e.sampleLoad(ctx)
	if err != nil {
		return 0, 0, err
	}
	s := e.consumer.expect(prefix, n, false)
	p, start, err := tn.startRelay(ctx, name, true)
	if err != nil {
		return 0, 0, err
	}
	defer p.kill()
	if err := s.wait(ctx, 10*time.Minute); err != nil {
		return 0, 0, err
	}
	_, last := s.span()
	if err := p.stop(); err != nil {
		return 0, 0, err
	}
	after, err := e.sampleLoad(ctx)
	if err != nil {
		return 0, 0, err
	}
	if updates := after.global.updates - before.global.updates - (after.bench.updates - before.bench.updates); updates > 0 {
		perStmt = float64(n) / float64(updates)
	}
	if unsent, err := tn.unsent(ctx, tables); err != nil {
		return 0, 0, err
	} else if unsent > 0 {
		return 0, 0, fmt.Errorf("%d rows not SENT after the relay stopped", unsent)
	}
	if _, dups := s.counts(); dups > 0 {
		progress("  %d duplicates", dups)
	}
	return float64(n) / last.Sub(start).Seconds(), perStmt, nil
}

// unsent counts the rows not SENT in the first n tables, 100 tables to a
// statement.
func (tn *tenants) unsent(ctx context.Context, n int) (int64, error) {
	var total int64
	for i := 0; i < n; i += 100 {
		var parts []string
		for j := i; j < min(i+100, n); j++ {
			parts = append(parts, "(SELECT COUNT(*) FROM "+tn.table(j)+" WHERE status <> 'SENT')")
		}
		var c int64
		if err := tn.e.primary.QueryRowContext(ctx, "SELECT "+strings.Join(parts, " + ")).Scan(&c); err != nil {
			return 0, fmt.Errorf("counting rows not SENT: %w", err)
		}
		total += c
	}
	return total, nil
}

// noisyNeighbour runs a relay (sweeper on) and measures the quiet tenant
// (table 1) at -tenants-quiet-rate rows/s for -tenants-quiet-duration:
// once alone, once while the noisy tenant (table 2) commits one
// -tenants-noisy-tx-row transaction, begun a second into the run; then
// again beside the noisy one with relay.lanes 4 keyed by {schema}, the
// noisy tenant one whose lane is not the quiet one's.
func (tn *tenants) noisyNeighbour(ctx context.Context, rep *report, name string) error {
	e := tn.e
	p, _, err := tn.startRelay(ctx, name, false)
	if err != nil {
		return err
	}
	defer p.kill()
	rate := e.o.tenantsQuietRate
	alone50, alone99, err := tn.quietRun(ctx, 0)
	if err != nil {
		return fmt.Errorf("quiet tenant alone: %w", err)
	}
	noisy50, noisy99, err := tn.quietRun(ctx, 2)
	if err != nil {
		return fmt.Errorf("quiet tenant beside a noisy one: %w", err)
	}
	progress("tenants: quiet tenant at %d rows/s: p50/p99 %s/%s alone, %s/%s beside a %d-row transaction", rate,
		alone50.Round(100*time.Microsecond), alone99.Round(100*time.Microsecond), noisy50.Round(100*time.Microsecond), noisy99.Round(100*time.Microsecond), e.o.tenantsNoisyTx)
	rep.add("tenants_quiet_p50_ms", ms(alone50), "ms")
	rep.add("tenants_quiet_p99_ms", ms(alone99), "ms")
	rep.add("tenants_quiet_noisy_p50_ms", ms(noisy50), "ms")
	rep.add("tenants_quiet_noisy_p99_ms", ms(noisy99), "ms")
	rep.add("tenants_noisy_tx_rows", float64(e.o.tenantsNoisyTx), "rows")
	if err := p.stop(); err != nil {
		return err
	}

	const lanes = 4
	noisy := tn.otherLane(1, lanes)
	if noisy < 0 {
		return nil // fewer than two tables on different lanes
	}
	savedTable, savedRelay := e.tableOverride, e.relaySection
	e.tableOverride = strings.TrimSuffix(e.tableOverride, "}") + `, route: {partition_key: "{schema}"}}`
	e.relaySection = fmt.Sprintf("lanes: %d", lanes)
	defer func() { e.tableOverride, e.relaySection = savedTable, savedRelay }()
	pl, _, err := tn.startRelay(ctx, name+"-lanes", false)
	if err != nil {
		return err
	}
	defer pl.kill()
	lanes50, lanes99, err := tn.quietRun(ctx, noisy)
	if err != nil {
		return fmt.Errorf("quiet tenant beside a noisy one, %d lanes: %w", lanes, err)
	}
	progress("tenants: quiet tenant at %d rows/s with %d lanes keyed by schema, the noisy one on another lane: p50/p99 %s/%s", rate, lanes,
		lanes50.Round(100*time.Microsecond), lanes99.Round(100*time.Microsecond))
	rep.add("tenants_quiet_noisy_lanes4_p50_ms", ms(lanes50), "ms")
	rep.add("tenants_quiet_noisy_lanes4_p99_ms", ms(lanes99), "ms")
	return pl.stop()
}

// otherLane returns a table whose schema's lane (relay.KeyHash, among
// lanes) is not table quiet's, -1 when there is none.
func (tn *tenants) otherLane(quiet, lanes int) int {
	lane := func(i int) uint64 { return relay.KeyHash(tn.schema(i)) % uint64(lanes) }
	for i := 2; i < tn.e.o.tenants; i++ {
		if i != quiet && lane(i) != lane(quiet) {
			return i
		}
	}
	return -1
}

// quietRun commits the quiet tenant's rows at -tenants-quiet-rate, a
// second's worth at a time, for -tenants-quiet-duration and, with noisy,
// until the noisy tenant's transaction (begun a second in) is all SENT, so
// the quiet rows cover the whole time the relay spends on it; then waits
// for every quiet row and returns their commit-to-delivery percentiles.
func (tn *tenants) quietRun(ctx context.Context, noisyTable int) (p50, p99 time.Duration, err error) {
	noisy := noisyTable > 0
	e := tn.e
	rate, d := e.o.tenantsQuietRate, e.o.tenantsQuietDuration
	prefix := e.nextPrefix("tq")
	s := e.consumer.expect(prefix, -1, true)
	noiseDone := make(chan error, 1)
	if noisy {
		go func() {
			if err := sleep(ctx, time.Second); err != nil {
				noiseDone <- err
				return
			}
			start := time.Now()
			err := tn.bigTx(ctx, tn.table(noisyTable), e.nextPrefix("tz"), e.o.tenantsNoisyTx)
			progress("  the noisy tenant's %d-row transaction took %s to write and commit", e.o.tenantsNoisyTx, time.Since(start).Round(time.Millisecond))
			noiseDone <- err
		}()
	}
	committed, quiet := false, !noisy
	start := time.Now()
	produced := 0
	for chunk := 0; ; chunk++ {
		if _, err := produceInto(ctx, e, tn.table(1), fmt.Sprintf("%s%d-", prefix, chunk), rate, rate); err != nil {
			return 0, 0, err
		}
		produced += rate
		if noisy && !committed {
			select {
			case err := <-noiseDone:
				if err != nil {
					return 0, 0, fmt.Errorf("noisy tenant: %w", err)
				}
				committed = true
			default:
			}
		}
		if committed && !quiet {
			n, err := tn.unsentIn(ctx, tn.table(noisyTable))
			if err != nil {
				return 0, 0, err
			}
			quiet = n == 0
			if quiet {
				progress("  the noisy tenant's rows were all SENT %s into the run", time.Since(start).Round(time.Millisecond))
			}
		}
		if quiet && time.Since(start) >= d {
			break
		}
		if time.Since(start) > 15*time.Minute {
			return 0, 0, fmt.Errorf("the noisy tenant's rows not all SENT after 15 minutes")
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if n, _ := s.counts(); n >= produced {
			break
		}
		if time.Now().After(deadline) {
			n, _ := s.counts()
			return 0, 0, fmt.Errorf("%d of the quiet tenant's %d rows delivered after 5 minutes", n, produced)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, 0, err
		}
	}
	p50, p99, _, _ = s.percentiles()
	return p50, p99, nil
}

// unsentIn counts the rows of table not SENT.
func (tn *tenants) unsentIn(ctx context.Context, table string) (int64, error) {
	var n int64
	err := tn.e.primary.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE status <> 'SENT'").Scan(&n)
	return n, err
}

// bigTx commits n PENDING rows into table in one transaction.
func (tn *tenants) bigTx(ctx context.Context, table, prefix string, n int) error {
	e := tn.e
	tx, err := e.primary.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	e.ownStmts.note("START TRANSACTION")
	spec := rowSpec{table: table, exchange: e.topo.exchange, size: e.o.payload}
	if err := insertRowsInto(ctx, countedTx{tx, &e.ownStmts}, spec, prefix, n, 1000, "PENDING"); err != nil {
		_ = tx.Rollback()
		return err
	}
	e.ownStmts.note("COMMIT")
	return tx.Commit()
}

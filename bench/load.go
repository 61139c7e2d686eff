package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// countedDB is the bench's own connection to the primary. Every statement
// it sends is counted by kind, so the primary's global counters can be
// corrected for them.
type countedDB struct {
	*sql.DB
	n *stmtCount
}

// openPrimary opens a counted pool on the run's database.
func (e *env) openPrimary(conns int) (*countedDB, error) {
	db, err := openDB(e.o.primaryDSN, e.dbName, nil)
	if err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return &countedDB{DB: db, n: &e.ownStmts}, nil
}

type stmtCount struct {
	questions, selects, updates, inserts atomic.Int64
}

func (c *stmtCount) note(q string) {
	c.questions.Add(1)
	q = strings.TrimSpace(q)
	if len(q) > 7 {
		q = q[:7]
	}
	switch strings.ToUpper(q) {
	case "SELECT ":
		c.selects.Add(1)
	case "UPDATE ":
		c.updates.Add(1)
	case "INSERT ":
		c.inserts.Add(1)
	}
}

func (c *stmtCount) snapshot() counters {
	return counters{questions: c.questions.Load(), selects: c.selects.Load(), updates: c.updates.Load(), inserts: c.inserts.Load()}
}

func (d *countedDB) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	d.n.note(q)
	return d.DB.ExecContext(ctx, q, args...)
}

func (d *countedDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	d.n.note(q)
	return d.DB.QueryRowContext(ctx, q, args...)
}

func (d *countedDB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	d.n.note(q)
	return d.DB.QueryContext(ctx, q, args...)
}

// countedTx is a transaction on the primary whose statements are counted.
type countedTx struct {
	*sql.Tx
	n *stmtCount
}

func (t countedTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	t.n.note(q)
	return t.Tx.ExecContext(ctx, q, args...)
}

// counters are statement counts: the primary's global ones, or the bench's.
type counters struct {
	questions, selects, updates, inserts int64
}

func (a counters) sub(b counters) counters {
	return counters{a.questions - b.questions, a.selects - b.selects, a.updates - b.updates, a.inserts - b.inserts}
}

// sample is the primary's global statement counters and CPU time, with the
// bench's own statement counts at the same moment.
type sample struct {
	at     time.Time
	global counters
	bench  counters
	wire   counters
	cpu    time.Duration
}

// sampleLoad reads SHOW GLOBAL STATUS on the primary. The statement counts
// itself (Questions includes the statement being run), and so does the
// bench's counter: the two cancel.
func (e *env) sampleLoad(ctx context.Context) (sample, error) {
	s := sample{at: time.Now(), cpu: processCPU(e.primaryPID)}
	rows, err := e.primary.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions','Com_select','Com_update','Com_insert')")
	if err != nil {
		return s, fmt.Errorf("reading the primary's counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return s, err
		}
		switch strings.ToLower(name) {
		case "questions":
			s.global.questions = v
		case "com_select":
			s.global.selects = v
		case "com_update":
			s.global.updates = v
		case "com_insert":
			s.global.inserts = v
		}
	}
	s.bench = e.ownStmts.snapshot()
	s.wire = e.wire.n.snapshot()
	return s, rows.Err()
}

// load is what a contender sent the primary between two samples: the
// global deltas minus the bench's own (producer, checks, these reads).
type load struct {
	stmts   counters
	wire    counters // the contender's own, counted at the proxy
	elapsed time.Duration
	cpu     time.Duration // the primary server process's CPU time
}

func loadBetween(a, b sample) load {
	return load{stmts: b.global.sub(a.global).sub(b.bench.sub(a.bench)), wire: b.wire.sub(a.wire), elapsed: b.at.Sub(a.at), cpu: b.cpu - a.cpu}
}

// noisy warns when the primary's counters saw more than the contender sent
// through the proxy: another client used the primary during the run.
func noisy(l load) {
	if extra := l.stmts.questions - l.wire.questions; extra > 2+l.wire.questions/100 {
		progress("  note: the primary served %d statements from other clients during this run; its counters overstate, the proxy (wire) count is the contender's alone", extra)
	}
}

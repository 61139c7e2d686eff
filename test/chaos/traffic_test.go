package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// keys is how many partition keys rows are spread over (routing_key of
// the status table, aggregateid of the status-less one): the order per key
// is what lanes keep.
const keys = 16

// nowhere is an exchange that does not exist: a row routed to it fails on
// every try and ends FAILED.
const nowhere = "chaos_nowhere"

// writer is the application: one connection at a time commits outbox
// transactions at the schedule's rate, in shapes the schedule's traffic
// draws, and logs each one, committed or rolled back, with its rows' ids,
// keys and bodies as committed. One writer commits in one order: its log is
// the commit order. Faults that write (re-queues, renames, cut-overs) take
// hold, so they fall between two of its transactions.
type writer struct {
	e    *env
	rng  *rand.Rand
	pool *sql.DB
	hold sync.Mutex

	mu       sync.Mutex
	txs      []Tx
	seq      int
	n        int            // rows numbered so far
	versions map[string]int // the latest version of each status-table row
	errs     int
	lastErr  string

	stop chan struct{}
	done chan struct{}
}

func startWriter(e *env) *writer {
	pool := testenv.Open(e.t, e.tp.DSN["switch1"], e.tp.DB)
	pool.SetMaxOpenConns(4)
	w := &writer{e: e, rng: rand.New(rand.NewPCG(e.s.Seed, 0x5eed)), pool: pool, versions: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if e.s.Traffic.PartialJSON {
		// The relay reads a replica, which logs what it applies with its own
		// settings: it must log the diffs too (the applier takes the global
		// value when it starts).
		for _, n := range switches {
			setPartialJSON(e, n, "PARTIAL_JSON")
			n := n
			e.t.Cleanup(func() { setPartialJSON(e, n, "") })
		}
	}
	if e.s.Traffic.Decoy > 0 {
		e.tp.Exec(e.t, "switch1", fmt.Sprintf("CREATE TABLE `%s`.`%s` LIKE `%s`.`%s`", e.tp.DB, decoyName(e.table), e.tp.DB, e.table))
	}
	go w.run()
	e.t.Cleanup(w.halt)
	return w
}

// setPartialJSON sets binlog_row_value_options on a replica of the
// topology (MySQL) and restarts its applier.
func setPartialJSON(e *env, server, v string) {
	for _, q := range []string{"STOP REPLICA SQL_THREAD", "SET GLOBAL binlog_row_value_options = '" + v + "'", "START REPLICA SQL_THREAD"} {
		if _, err := e.tp.Servers[server].Exec(q); err != nil {
			e.t.Errorf("%s: %s: %v", server, q, err)
		}
	}
}

// decoyName is the outbox table's name in other letter case: another
// table where names are case-sensitive (lower_case_table_names=0, Linux's
// default).
func decoyName(table string) string {
	return strings.ToUpper(table[:1]) + table[1:]
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *writer) run() {
	defer close(w.done)
	rate := float64(w.e.s.Traffic.Rate)
	next := time.Now()
	for {
		select {
		case <-w.stop:
			return
		case <-time.After(time.Until(next)): // the pace
		}
		w.hold.Lock()
		rows := w.step()
		w.hold.Unlock()
		next = next.Add(time.Duration(float64(rows) / rate * float64(time.Second)))
		if late := time.Since(next); late > time.Second {
			next = time.Now().Add(-time.Second) // no burst to make up a stall
		}
	}
}

// log records a transaction and returns its rows' count.
func (w *writer) log(kind string, outcome Outcome, rows []Row) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	tx := Tx{Kind: kind, At: time.Now(), Outcome: outcome, Rows: rows}
	if outcome != RolledBack {
		w.seq++
		tx.Seq = w.seq
	}
	w.txs = append(w.txs, tx)
	return len(rows)
}

func (w *writer) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs++
	w.lastErr = err.Error()
}

// newRow numbers a row and draws its key.
func (w *writer) newRow() (id, key string, n int) {
	w.mu.Lock()
	w.n++
	n = w.n
	w.mu.Unlock()
	key = fmt.Sprintf("k%02d", w.rng.IntN(keys))
	if w.e.s.Config.Status() {
		return fmt.Sprintf("m%07d", n), key, n
	}
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", n), key, n
}

// pad is filler: mostly ASCII, now and then 4-byte UTF-8, rarely 100 KB.
func (w *writer) pad() string {
	switch r := w.rng.IntN(1000); {
	case r < 2:
		return strings.Repeat("0123456789abcdef", 6400)
	case r < 50:
		return "caf\u00e9 \U0001F600 " + strings.Repeat("x", w.rng.IntN(64))
	default:
		return strings.Repeat("p", w.rng.IntN(96))
	}
}

func body(key string, n, v int, pad string) string {
	return fmt.Sprintf(`{"key":"%s","n":%d,"v":%d,"pad":"%s"}`, key, n, v, pad)
}

// sized is a new row's body, its pad filled with ASCII up to
// Traffic.Payload bytes: still the JSON the checker compares (normalize),
// and no draw more, so the traffic's other draws are the seed's own.
func (w *writer) sized(key string, n int, pad string) string {
	b := body(key, n, 0, pad)
	if size := w.e.s.Traffic.Payload; len(b) < size {
		b = body(key, n, 0, pad+strings.Repeat("p", size-len(b)))
	}
	return b
}

// step runs one transaction (or an XA branch around one or two others)
// and returns how many rows it wrote.
func (w *writer) step() int {
	t := w.e.s.Traffic
	switch r := w.rng.Float64(); {
	case r < t.XA:
		return w.xa()
	case r < t.XA+t.Large:
		return w.plain("large", 500+w.rng.IntN(2501), false)
	}
	return w.plain("insert", 1+w.rng.IntN(t.MaxRows), true)
}

// txRows draws the rows of a transaction: bodies as committed, and the
// statements that write them (the inserts, then the in-transaction updates,
// cancels and deletes).
func (w *writer) txRows(count int, shapes bool) (rows []Row, stmts []stmt) {
	t := w.e.s.Traffic
	status := w.e.s.Config.Status()
	update := shapes && w.rng.Float64() < t.Update
	type ins struct {
		row   Row
		first string // the body inserted
		poison,
		decoy bool
		table string // where it is inserted
	}
	var all []ins
	for range count {
		id, key, n := w.newRow()
		final := w.sized(key, n, w.pad())
		in := ins{row: Row{ID: id, Key: key, Body: final, Expect: Deliver}, first: final}
		if update && w.rng.IntN(2) == 0 {
			in.first = body(key, n, 0, "draft")
		}
		if shapes && t.Poison > 0 && w.rng.Float64() < t.Poison {
			in.poison, in.row.Expect = true, Fail
		}
		if shapes && t.Decoy > 0 && w.rng.Float64() < t.Decoy {
			in.decoy, in.row.Expect = true, Never
		}
		in.table = w.e.table
		if w.e.s.Config.Tenants() {
			// One row in eight in the outbox table, the others spread over
			// the tenant tables: a transaction's rows in several tables.
			if k := w.rng.IntN(len(tenantTables) + 1); k > 0 {
				in.table = tenantTables[k-1]
			}
		}
		if in.decoy {
			in.table = decoyName(w.e.table)
		}
		all = append(all, in)
	}
	// Inserts of up to 500 rows a statement, one table at a time (the
	// decoys apart), in the order the tables first come.
	var order []string
	for _, decoy := range []bool{false, true} {
		for _, b := range all {
			if b.decoy == decoy && !slices.Contains(order, b.table) {
				order = append(order, b.table)
			}
		}
	}
	for _, table := range order {
		var batch []ins
		flush := func() {
			if len(batch) == 0 {
				return
			}
			var q strings.Builder
			var args []any
			if status {
				fmt.Fprintf(&q, "INSERT INTO `%s` (message_id, exchange, routing_key, content, max_retry_count) VALUES ", table)
				for i, b := range batch {
					if i > 0 {
						q.WriteByte(',')
					}
					q.WriteString("(?,?,?,?,?)")
					ex, retries := w.e.exchange, 5
					if b.poison {
						ex, retries = nowhere, 2
					}
					args = append(args, b.row.ID, ex, b.row.Key, b.first, retries)
				}
			} else {
				fmt.Fprintf(&q, "INSERT INTO `%s` (id, aggregatetype, aggregateid, type, payload) VALUES ", table)
				for i, b := range batch {
					if i > 0 {
						q.WriteByte(',')
					}
					q.WriteString("(?,?,?,?,?)")
					args = append(args, b.row.ID, w.e.exchange, b.row.Key, "order.created", b.first)
				}
			}
			stmts = append(stmts, stmt{q.String(), args})
			batch = batch[:0]
		}
		for _, b := range all {
			if b.table != table {
				continue
			}
			batch = append(batch, b)
			if len(batch) == 500 {
				flush()
			}
		}
		flush()
	}
	for i := range all {
		b := &all[i]
		if b.decoy {
			rows = append(rows, b.row)
			continue
		}
		if b.first != b.row.Body {
			if status {
				stmts = append(stmts, stmt{fmt.Sprintf("UPDATE `%s` SET content = ? WHERE message_id = ?", b.table), []any{b.row.Body, b.row.ID}})
			} else if t.PartialJSON {
				// JSON_SET of one field: logged as a diff with
				// binlog_row_value_options=PARTIAL_JSON.
				var doc struct{ Pad string }
				_ = jsonUnmarshal(b.row.Body, &doc)
				stmts = append(stmts, stmt{fmt.Sprintf("UPDATE `%s` SET payload = JSON_SET(payload, '$.pad', ?) WHERE id = ?", b.table), []any{doc.Pad, b.row.ID}})
			} else {
				stmts = append(stmts, stmt{fmt.Sprintf("UPDATE `%s` SET payload = ? WHERE id = ?", b.table), []any{b.row.Body, b.row.ID}})
			}
		}
		switch {
		case shapes && status && !b.poison && w.rng.Float64() < t.Cancel:
			// Not publishable at the commit: never published (docs/lifecycle.md).
			stmts = append(stmts, stmt{fmt.Sprintf("UPDATE `%s` SET status = 'CANCELLED' WHERE message_id = ?", b.table), []any{b.row.ID}})
			b.row.Expect = Never
		case shapes && !status && w.rng.Float64() < t.Delete:
			// The Debezium pattern: the insert is the message.
			stmts = append(stmts, stmt{fmt.Sprintf("DELETE FROM `%s` WHERE id = ?", b.table), []any{b.row.ID}})
			b.row.Gone = true
		}
		rows = append(rows, b.row)
	}
	return rows, stmts
}

type stmt struct {
	q    string
	args []any
}

// plain runs one transaction on the pool: committed, or rolled back when
// the traffic draws it (or a statement fails: a deadlock with a cut-over's
// copy, as an application sees one).
func (w *writer) plain(kind string, count int, shapes bool) int {
	rows, stmts := w.txRows(count, shapes)
	rollback := shapes && w.rng.Float64() < w.e.s.Traffic.Rollback
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := w.pool.Conn(ctx)
	if err != nil {
		w.fail(err)
		return 0
	}
	defer conn.Close()
	if w.e.s.Traffic.PartialJSON {
		if _, err := conn.ExecContext(ctx, "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'"); err != nil {
			w.fail(err)
			return 0
		}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		w.fail(err)
		return 0
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s.q, s.args...); err != nil {
			_ = tx.Rollback()
			w.fail(err)
			return w.log(kind, RolledBack, rows)
		}
	}
	if rollback {
		if err := tx.Rollback(); err != nil {
			w.fail(err)
			return w.log(kind+"-rollback", Unknown, rows)
		}
		return w.log(kind+"-rollback", RolledBack, rows)
	}
	if err := tx.Commit(); err != nil {
		w.fail(err)
		return w.log(kind, Unknown, rows)
	}
	return w.log(kind, Committed, rows)
}

// xa prepares an XA branch, commits one or two plain transactions, then
// commits the branch (or rolls it back): its rows take their place in the
// commit order at XA COMMIT.
func (w *writer) xa() int {
	rows, stmts := w.txRows(1+w.rng.IntN(w.e.s.Traffic.MaxRows), false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := w.pool.Conn(ctx)
	if err != nil {
		w.fail(err)
		return 0
	}
	defer conn.Close()
	xid := fmt.Sprintf("chaos-%d-%d", w.e.s.Seed, w.rng.Int64())
	exec := func(q string, args ...any) error {
		_, err := conn.ExecContext(ctx, q, args...)
		return err
	}
	if err := exec("XA START '" + xid + "'"); err != nil {
		w.fail(err)
		return 0
	}
	for _, s := range stmts {
		if err := exec(s.q, s.args...); err != nil {
			w.fail(err)
			_ = exec("XA END '" + xid + "'")
			_ = exec("XA ROLLBACK '" + xid + "'")
			return w.log("xa", RolledBack, rows)
		}
	}
	if err := exec("XA END '" + xid + "'"); err != nil {
		w.fail(err)
		return w.log("xa", Unknown, rows)
	}
	if err := exec("XA PREPARE '" + xid + "'"); err != nil {
		w.fail(err)
		_ = exec("XA ROLLBACK '" + xid + "'")
		return w.log("xa", Unknown, rows)
	}
	n := len(rows)
	for range 1 + w.rng.IntN(2) {
		n += w.plain("insert", 1+w.rng.IntN(w.e.s.Traffic.MaxRows), true)
	}
	if w.rng.IntN(4) == 0 {
		if err := exec("XA ROLLBACK '" + xid + "'"); err != nil {
			w.fail(err)
			w.log("xa-rollback", Unknown, rows)
			return n
		}
		w.log("xa-rollback", RolledBack, rows)
		return n
	}
	if err := exec("XA COMMIT '" + xid + "'"); err != nil {
		w.fail(err)
		w.log("xa", Unknown, rows)
		return n
	}
	w.log("xa", Committed, rows)
	return n
}

// requeue puts up to n SENT rows back to PENDING with a new body, as an
// application re-queues a message (docs/lifecycle.md, "Put back to a
// publishable status"): each is a new version to deliver. later re-queues
// them for two hours on (next_retry_time): the sweeper's then.
func (w *writer) requeue(n int, later bool) (int, error) {
	w.hold.Lock()
	defer w.hold.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := w.pool.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	q := fmt.Sprintf("SELECT message_id, routing_key, content FROM `%s` WHERE status = 'SENT' ORDER BY RAND() LIMIT %d FOR UPDATE", w.e.table, n)
	res, err := tx.QueryContext(ctx, q)
	if err != nil {
		return 0, err
	}
	type sent struct{ id, key, body string }
	var picked []sent
	for res.Next() {
		var s sent
		if err := res.Scan(&s.id, &s.key, &s.body); err != nil {
			res.Close()
			return 0, err
		}
		picked = append(picked, s)
	}
	res.Close()
	var rows []Row
	for _, s := range picked {
		w.mu.Lock()
		v := w.versions[s.id] + 1
		w.mu.Unlock()
		var doc struct {
			N int `json:"n"`
		}
		_ = jsonUnmarshal(s.body, &doc)
		b := body(s.key, doc.N, v, fmt.Sprintf("requeued %d", v))
		next, expect := "NULL", Deliver
		if later {
			next, expect = "NOW(3) + INTERVAL 2 HOUR", Later
		}
		r, err := tx.ExecContext(ctx, fmt.Sprintf("UPDATE `%s` SET status = 'PENDING', content = ?, retry_count = 0, next_retry_time = %s WHERE message_id = ? AND status = 'SENT'", w.e.table, next), b, s.id)
		if err != nil {
			return 0, err
		}
		if k, _ := r.RowsAffected(); k != 1 {
			return 0, fmt.Errorf("re-queue of %s changed %d rows", s.id, k)
		}
		rows = append(rows, Row{ID: s.id, Key: s.key, Version: v, Body: b, Expect: expect})
	}
	if err := tx.Commit(); err != nil {
		w.log("requeue", Unknown, rows)
		return 0, err
	}
	w.mu.Lock()
	for _, r := range rows {
		w.versions[r.ID] = r.Version
	}
	w.mu.Unlock()
	w.log("requeue", Committed, rows)
	return len(rows), nil
}

// history returns the log so far.
func (w *writer) history() ([]Tx, int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Tx(nil), w.txs...), w.errs, w.lastErr
}

// resolve settles the transactions whose commit answer was lost, by what
// the tables hold: a transaction's rows are all there or none is (rows it
// deleted itself tell nothing).
func resolve(ctx context.Context, db *sql.DB, txs []Tx, tables []string, status bool) error {
	for i := range txs {
		tx := &txs[i]
		if tx.Outcome != Unknown {
			continue
		}
		for _, r := range tx.Rows {
			if r.Gone || r.Expect == Never {
				continue
			}
			found := false
			for _, table := range tables {
				var q string
				var args []any
				if status {
					q = fmt.Sprintf("SELECT COUNT(*) FROM `%s` WHERE message_id = ? AND content = ?", table)
					args = []any{r.ID, r.Body}
				} else {
					q = fmt.Sprintf("SELECT COUNT(*) FROM `%s` WHERE id = ?", table)
					args = []any{r.ID}
				}
				var n int
				if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
					if strings.Contains(err.Error(), "doesn't exist") {
						continue // a table a cut-over dropped
					}
					return err
				}
				found = found || n > 0
			}
			if found {
				tx.Outcome = Committed
			} else {
				tx.Outcome = RolledBack
			}
			break
		}
	}
	return nil
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

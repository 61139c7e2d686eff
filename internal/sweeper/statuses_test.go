package sweeper

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// recorder is a rowstatus.Execer that keeps the statements instead of running
// them, and reports one row changed.
type recorder struct{ stmts []stmt }

func (r *recorder) ExecContext(_ context.Context, q string, args ...any) (sql.Result, error) {
	r.stmts = append(r.stmts, stmt{q, args})
	return driverResult(1), nil
}

type driverResult int64

func (d driverResult) LastInsertId() (int64, error) { return 0, nil }
func (d driverResult) RowsAffected() (int64, error) { return int64(d), nil }

// emptyValue finds a status written or compared as nothing: SET st = ”,
// SET st =  WHERE, IN ().
var emptyValue = regexp.MustCompile("= ''|=\\s*(,|WHERE|\\)|$)|IN \\(\\s*\\)|= {2}")

// lifecycleStatements returns every statement the status writer and the
// sweeper would send for t.
func lifecycleStatements(t *testing.T, tb *outbox.Table) []stmt {
	t.Helper()
	ctx := context.Background()
	rec := &recorder{}
	w := rowstatus.NewWriter(nil, rowstatus.Retry{})
	if tb.Columns.Error != "" {
		// No server to read the column's length from: FitError falls back
		// to the relay's cap. Reading it is TestErrorTextFitsTheColumn's.
		tb = clone(tb)
		tb.Columns.Error = ""
	}
	if _, err := w.MarkClaimedSent(ctx, rec, tb, []any{1, 2}, tb.Statuses.Publishable, nil); err != nil {
		t.Fatal(err)
	}
	for _, retries := range []int{0, 4} {
		a := rowstatus.Attempt{ID: 1, Retries: retries, MaxRetries: 5, Reason: "no route", FromStatuses: tb.Statuses.Publishable}
		if _, err := w.MarkRetryOn(ctx, rec, tb, a); err != nil {
			t.Fatalf("MarkRetry with %d retries: %v", retries, err)
		}
	}
	out := rec.stmts
	p, err := newPlan(tb)
	if err != nil {
		return out // not swept: the sweeper sends nothing
	}
	add := func(q string, args []any) {
		if q != "" {
			out = append(out, stmt{q, args})
		}
	}
	add(p.LookSQL(time.Minute, time.Minute))
	add(p.ClaimSQL(time.Minute, 10))
	if q, args := p.ClaimUpdateSQL(2, time.Minute); q != "" {
		add(q, append(args, 1, 2)) // the claimed ids follow
	}
	if q, args, ok := p.ZombieResetSQL(time.Minute, 10); ok {
		add(q, args)
	}
	add(p.ArchiveDeleteSQL(time.Hour, 10))
	if q, args, err := p.RequeueNextSQL(outboxsql.RequeueMatch{IDs: []string{"1"}}, int64(0), 10); err == nil {
		add(q, args)
	}
	if q, args, err := p.RequeueIDsSQL(outboxsql.RequeueMatch{IDs: []string{"1"}}, 1); err == nil {
		add(q, append(args, 1))
	}
	return out
}

func clone(tb *outbox.Table) *outbox.Table {
	c := *tb
	return &c
}

// Every combination of status values either validates and gives every
// lifecycle write a value to write (and, against a real server, valid SQL),
// or is refused at validation with the statuses field named.
func TestEveryStatusesCombination(t *testing.T) {
	names := []string{"P", "SG", "S", "F", "X"}
	numbers := map[string]string{"P": "0", "SG": "3", "S": "1", "F": "2", "X": "9"}
	var valid []*outbox.Table
	refused := 0
	for mask := 0; mask < 16; mask++ {
		for pub := 0; pub < 32; pub++ {
			for _, numeric := range []bool{false, true} {
				for _, full := range []bool{false, true} {
					val := func(v string) string {
						if numeric {
							return numbers[v]
						}
						return v
					}
					var st outbox.Statuses
					st.Numeric = numeric
					if mask&1 != 0 {
						st.Pending = val("P")
					}
					if mask&2 != 0 {
						st.Sending = val("SG")
					}
					if mask&4 != 0 {
						st.Sent = val("S")
					}
					if mask&8 != 0 {
						st.Failed = val("F")
					}
					for i, n := range names {
						if pub&(1<<i) != 0 {
							st.Publishable = append(st.Publishable, val(n))
						}
					}
					name := "t_str"
					if numeric {
						name = "t_num"
					}
					tb := &outbox.Table{Schema: "app", Name: name, Statuses: st, Route: outbox.Route{Exchange: "ex"},
						Columns: outbox.Columns{ID: "id", Payload: "body", Status: "st", CreatedAt: "created"}}
					if full {
						tb.Columns.RetryCount, tb.Columns.NextRetryTime, tb.Columns.Error = "retries", "next_retry", "err"
						tb.Columns.UpdatedAt, tb.Columns.Version = "updated", "ver"
					}
					tb.MaxRetries = 5
					if err := tb.Validate("tables[0]"); err != nil {
						if !strings.Contains(err.Error(), "tables[0].statuses.") {
							t.Fatalf("%+v refused without naming the statuses field: %v", st, err)
						}
						refused++
						continue
					}
					for _, s := range lifecycleStatements(t, tb) {
						if emptyValue.MatchString(s.sql) {
							t.Fatalf("statuses %+v (full columns %v) validated but give: %s", st, full, s.sql)
						}
					}
					valid = append(valid, tb)
				}
			}
		}
	}
	t.Logf("%d combinations valid, %d refused at validation", len(valid), refused)
	if len(valid) == 0 || refused == 0 {
		t.Fatal("the enumeration proves nothing")
	}
	// The case that used to write SET st = '': sent and publishable only.
	only := &outbox.Table{Schema: "app", Name: "t", Route: outbox.Route{Exchange: "ex"},
		Columns:  outbox.Columns{ID: "id", Payload: "body", Status: "st"},
		Statuses: outbox.Statuses{Sent: "1", Publishable: []string{"1"}, Numeric: true}}
	if err := only.Validate("tables[0]"); err == nil || !strings.Contains(err.Error(), "tables[0].statuses.sent") {
		t.Fatalf("{sent: 1, publishable: [1]}: %v", err)
	}
	if testing.Short() {
		return
	}
	runOnServer(t, valid)
}

// runOnServer runs a sample of the statements against tables on the test
// stack's primary, each in a transaction rolled back: the server must
// accept them all.
func runOnServer(t *testing.T, tables []*outbox.Table) {
	dsn := os.Getenv("RELAY_TEST_PRIMARY_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3307)/"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MultiStatements = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	schema := fmt.Sprintf("t_statuses_%d_%06d", time.Now().Unix()%100000, rand.IntN(1000000))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+schema); err != nil {
		t.Fatalf("the test stack's primary (run scripts/stack.sh up): %v", err)
	}
	defer func() { _, _ = db.Exec("DROP DATABASE " + schema) }()
	for _, ddl := range []string{
		"CREATE TABLE %s.t_str (id BIGINT PRIMARY KEY, body TEXT, st VARCHAR(16), retries INT, next_retry DATETIME(3), err TEXT, created DATETIME(3), updated DATETIME(3), ver INT)",
		"CREATE TABLE %s.t_num (id BIGINT PRIMARY KEY, body TEXT, st TINYINT, retries INT, next_retry DATETIME(3), err TEXT, created DATETIME(3), updated DATETIME(3), ver INT)",
	} {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(ddl, schema)); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for i, tb := range tables {
		if i%7 != 0 { // a spread of the combinations keeps it quick
			continue
		}
		tb = clone(tb)
		tb.Schema = schema
		for _, s := range lifecycleStatements(t, tb) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tx.ExecContext(ctx, s.sql, s.args...)
			_ = tx.Rollback()
			if err != nil {
				t.Fatalf("statuses %+v: the server refuses %s: %v", tb.Statuses, s.sql, err)
			}
			n++
		}
	}
	t.Logf("%d statements accepted by the server", n)
}

// Package testenv owns every test's access to the local test stack
// (scripts/stack.sh): server addresses, a fresh database per test, queues
// bound to a fresh exchange, a consumer that records every delivery, a
// Redis key prefix per test, unique names and Eventually. Tests fail, never
// skip, when a server is missing, unless -short is given. It imports none of
// the relay's packages, so pkg/inbox's own tests use it too; the relay under
// test lives in internal/testenv/relaytest.
package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
	"github.com/go-sql-driver/mysql"
)

// Env reads a setting with a default.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Stack addresses (scripts/stack.sh env prints the same): the servers of
// the Current flavour, unless a RELAY_TEST_*_DSN variable names others.
var (
	PrimaryDSN  = Env("RELAY_TEST_PRIMARY_DSN", Current.dsn(0))
	ReplicaDSN  = Env("RELAY_TEST_REPLICA_DSN", Current.dsn(1))
	Replica2DSN = Env("RELAY_TEST_REPLICA2_DSN", Current.dsn(2))
	MisconfDSN  = Env("RELAY_TEST_MISCONF_DSN", Current.dsn(3))
	// Switch1DSN, Switch2DSN and Switch3DSN are servers tests wire into a
	// replication topology of their own (testenv.NewTopology).
	Switch1DSN = Env("RELAY_TEST_SWITCH1_DSN", Current.dsn(4))
	Switch2DSN = Env("RELAY_TEST_SWITCH2_DSN", Current.dsn(5))
	Switch3DSN = Env("RELAY_TEST_SWITCH3_DSN", Current.dsn(6))
	AMQPURL    = Env("RELAY_TEST_AMQP_URL", fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", Current.AMQPPort))
	RedisAddr  = Env("RELAY_TEST_REDIS_ADDR", "127.0.0.1:6379")
	// ManagementURL is the broker's management API (stack.sh enables it:
	// 15672 for RabbitMQ 3.10, 15673 for 4.3).
	ManagementURL = Env("RELAY_TEST_MANAGEMENT_URL", fmt.Sprintf("http://guest:guest@127.0.0.1:%d", Current.AMQPPort+10000))
)

// AMQPHostPort is the broker's address, host:port.
func AMQPHostPort() string {
	u, err := url.Parse(AMQPURL)
	if err != nil {
		panic(err)
	}
	return u.Host
}

// Integration marks a test that needs the stack: skipped with -short,
// otherwise it runs and fails loudly if a server is missing.
func Integration(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the stack (scripts/stack.sh up); skipped with -short")
	}
}

// Primary is an integration test's connection to the stack's primary,
// on no database (for queries that read no table).
func Primary(t testing.TB) *sql.DB {
	t.Helper()
	Integration(t)
	return Open(t, PrimaryDSN, "")
}

// HostPort splits a DSN's address.
func HostPort(dsn string) (string, int) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic(err)
	}
	h, p, _ := net.SplitHostPort(c.Addr)
	port, _ := strconv.Atoi(p)
	return h, port
}

// dsnOn is dsn on database db with the options tests use; multi allows
// several statements in one call (DDL files).
func dsnOn(t testing.TB, dsn, db string, multi bool) string {
	t.Helper()
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parsing DSN: %v", err)
	}
	c.DBName = db
	c.ParseTime = true
	c.InterpolateParams = true
	c.MultiStatements = multi
	return c.FormatDSN()
}

// Open opens a DSN with the options tests use, optionally on a database.
func Open(t testing.TB, dsn, db string) *sql.DB {
	t.Helper()
	full := dsnOn(t, dsn, db, true)
	h, p := HostPort(dsn)
	conn, err := sql.Open("mysql", full)
	if err != nil {
		t.Fatalf("opening %s:%d: %v", h, p, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := conn.PingContext(ctx); err != nil {
		t.Fatalf("MySQL at %s:%d is not reachable (run scripts/stack.sh up): %v", h, p, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// UniqueName returns prefix_<random>, safe as an identifier.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%06d", prefix, time.Now().Unix()%100000, rand.IntN(1000000))
}

// DB is a fresh database on the primary, replicated to the replicas.
type DB struct {
	Name string
	// DSN is the primary's DSN on this database as an application writes
	// it: parseTime and interpolateParams, one statement per call (Primary
	// allows several, for DDL files). Library tests (pkg/inbox) open their
	// pool on it.
	DSN     string
	Primary *sql.DB
	Replica *sql.DB // nil for NewPrimaryDB
}

// NewDB creates a database on the primary, runs the DDL files given (paths
// relative to the repository root), waits for it on the replica, and drops
// it when the test ends.
func NewDB(t testing.TB, ddlFiles ...string) *DB {
	t.Helper()
	d := NewPrimaryDB(t, ddlFiles...)
	d.Replica = Open(t, ReplicaDSN, "")
	d.WaitReplicated(t, 30*time.Second)
	return d
}

// NewPrimaryDB is NewDB for a test that needs only the primary (the inbox's
// tests): it does not wait for the replicas.
func NewPrimaryDB(t testing.TB, ddlFiles ...string) *DB {
	t.Helper()
	name := UniqueName("t")
	root := Open(t, PrimaryDSN, "")
	if _, err := root.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("creating database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(t, root, name) })
	d := &DB{Name: name, DSN: dsnOn(t, PrimaryDSN, name, false), Primary: Open(t, PrimaryDSN, name)}
	for _, f := range ddlFiles {
		ddl, err := os.ReadFile(RepoPath(f))
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		d.Exec(t, string(ddl))
	}
	return d
}

// dropDatabase drops a test's database, waiting at most 30 s for the
// tables' metadata locks: a transaction a failed test left open must not
// hold the suite forever (lock_wait_timeout is a year by default).
func dropDatabase(t testing.TB, root *sql.DB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	conn, err := root.Conn(ctx)
	if err == nil {
		defer conn.Close()
		if _, err = conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 30"); err == nil {
			_, err = conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		}
	}
	if err != nil {
		t.Logf("dropping the test database %s: %v", name, err)
	}
}

// Exec runs statements on the primary or fails the test.
func (d *DB) Exec(t testing.TB, q string, args ...any) sql.Result {
	t.Helper()
	res, err := d.Primary.Exec(q, args...)
	if err != nil {
		t.Fatalf("exec %.80q: %v", q, err)
	}
	return res
}

// WaitReplicated waits until the replica has applied everything the primary
// has logged so far.
func (d *DB) WaitReplicated(t testing.TB, within time.Duration) {
	t.Helper()
	d.waitOn(t, d.Replica, "replica", within)
}

// WaitReplicatedOn is WaitReplicated for another replica of the primary
// (the stack's replica2, which a test reading from it must wait for: it may
// be catching up on someone else's writes).
func (d *DB) WaitReplicatedOn(t testing.TB, dsn string, within time.Duration) {
	t.Helper()
	h, p := HostPort(dsn)
	d.waitOn(t, Open(t, dsn, ""), fmt.Sprintf("replica %s:%d", h, p), within)
}

func (d *DB) waitOn(t testing.TB, replica *sql.DB, name string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	pos, err := Current.GTIDPos(ctx, d.Primary)
	if err != nil {
		t.Fatalf("reading primary GTID: %v", err)
	}
	if err := Current.WaitApplied(ctx, replica, pos, within); err != nil {
		t.Fatalf("%s did not reach %s within %s: %v", name, pos, within, err)
	}
}

// Count runs a COUNT(*)-style query on the primary.
func (d *DB) Count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := d.Primary.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("query %.80q: %v", q, err)
	}
	return n
}

// FirstColumn returns the first column of every row query returns, as text:
// for SHOW statements, whose other columns vary between servers.
func FirstColumn(t testing.TB, db *sql.DB, query string) []string {
	t.Helper()
	return column(t, db, query, func([]string) int { return 0 })
}

// ColumnOf returns one column, by name, of every row query returns, as
// text: for SHOW statements, whose column sets vary between servers.
func ColumnOf(t testing.TB, db *sql.DB, query, name string) []string {
	t.Helper()
	return column(t, db, query, func(cols []string) int {
		for i, c := range cols {
			if c == name {
				return i
			}
		}
		t.Fatalf("query %.80q has no column %s (%v)", query, name, cols)
		return -1
	})
}

// column returns the column pick chooses of every row query returns, as
// text (NULL as "").
func column(t testing.TB, db *sql.DB, query string, pick func(cols []string) int) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("query %.80q: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatalf("query %.80q: %v", query, err)
	}
	at := pick(cols)
	var out []string
	for rows.Next() {
		vals, err := sqlrows.ScanText(rows, len(cols))
		if err != nil {
			t.Fatalf("query %.80q: %v", query, err)
		}
		out = append(out, vals[at].String)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("query %.80q: %v", query, err)
	}
	return out
}

// RepoPath resolves a path relative to the repository root.
func RepoPath(rel string) string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(dir + "/go.mod"); err == nil {
			return dir + "/" + rel
		}
		parent := dir[:max(strings.LastIndex(dir, "/"), 0)]
		if parent == "" || parent == dir {
			return rel
		}
		dir = parent
	}
}

// Eventually polls cond every 20ms until it holds or the deadline passes,
// then fails with the message.
func Eventually(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if _, ok := poll(within, func() (bool, string) { return cond(), "" }); !ok {
		t.Fatalf("after %s: "+format, append([]any{within}, args...)...)
	}
}

// Receive is the next value from ch. The test fails at once when none
// comes within the time given; what says what did not happen.
func Receive[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("after %s: %s", within, what)
		var zero T
		return zero
	}
}

// WaitFor is Eventually for a condition that can say what it saw: the
// failure names what was awaited and the last state cond reported.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	if state, ok := poll(within, cond); !ok {
		t.Fatalf("timed out after %s waiting for %s; last state: %s", within, what, state)
	}
}

// poll calls cond every 20ms until it holds or within has passed, and
// returns the last state cond reported.
func poll(within time.Duration, cond func() (bool, string)) (string, bool) {
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return state, true
		}
		if time.Now().After(deadline) {
			return state, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package console

// A replica for the handler tests: a database/sql driver that answers the
// console's two queries with canned rows and records what it was asked.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/replay"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

type fakeReplica struct {
	mu      sync.Mutex
	queries []string
	groups  [][]driver.Value // st, err, rows, first, last, next, first id
	rows    []map[string]driver.Value
}

func (f *fakeReplica) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.queries...)
}

func (f *fakeReplica) Connect(context.Context) (driver.Conn, error) { return fakeConn{f}, nil }
func (f *fakeReplica) Driver() driver.Driver                        { return nil }

type fakeConn struct{ f *fakeReplica }

func (fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no prepare") }
func (fakeConn) Close() error                        { return nil }
func (fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("fake: no transactions") }

func (c fakeConn) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	if strings.HasPrefix(q, "SELECT g.st") {
		var vals [][]driver.Value
		for _, g := range f.groups {
			vals = append(vals, []driver.Value{g[0], []byte("hash"), g[2], g[3], g[4], g[5], g[6]})
		}
		return &fakeRows{cols: []string{"st", "h", "n", "first", "last", "next", "id"}, vals: vals}, nil
	}
	if strings.HasPrefix(q, "SELECT `id`, LEFT(") {
		var vals [][]driver.Value
		for _, g := range f.groups {
			vals = append(vals, []driver.Value{g[6], g[1]})
		}
		return &fakeRows{cols: []string{"id", "err"}, vals: vals}, nil
	}
	// SELECT `a`, `b`, ..., LEFT(...), seen, nrt FROM ...
	list := q[len("SELECT "):strings.Index(q, ", LEFT(")]
	var cols []string
	for _, c := range strings.Split(list, ", ") {
		cols = append(cols, strings.Trim(c, "`"))
	}
	var vals [][]driver.Value
	for _, r := range f.rows {
		var v []driver.Value
		for _, c := range cols {
			v = append(v, r[c])
		}
		vals = append(vals, append(v, r["error_msg"], r["update_time"], nil))
	}
	return &fakeRows{cols: append(cols, "err", "seen", "nrt"), vals: vals}, nil
}

type fakeRows struct {
	cols []string
	vals [][]driver.Value
	i    int
}

func (r *fakeRows) Columns() []string { return r.cols }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.i >= len(r.vals) {
		return io.EOF
	}
	copy(dest, r.vals[r.i])
	r.i++
	return nil
}

// fakeActions records the actions asked for.
type fakeActions struct {
	mu       sync.Mutex
	requeues []command.RequeueOptions
	rows     int64
}

func (a *fakeActions) Requeue(_ context.Context, o command.RequeueOptions) (command.RequeueResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requeues = append(a.requeues, o)
	return command.RequeueResult{Rows: a.rows, DryRun: o.DryRun}, nil
}

func (a *fakeActions) Replay(_ context.Context, o command.ReplayOptions, _ io.Writer) (*replay.Summary, error) {
	return &replay.Summary{Total: 3, DryRun: o.DryRun}, nil
}

func (a *fakeActions) done() []command.RequeueOptions {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]command.RequeueOptions(nil), a.requeues...)
}

// seedTable is the producer-message preset in schema shop.
func seedTable() *outbox.Table {
	t, _ := outbox.Preset("producer-message")
	t.Schema = "shop"
	_ = t.Validate("tables[0]")
	return &t
}

func newFakeReplica() *fakeReplica {
	now := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	return &fakeReplica{
		groups: [][]driver.Value{
			{[]byte("failed"), []byte("publish: no exchange 'gone'"), int64(3), now, now, nil, int64(7)},
			{[]byte("retrying"), []byte("nacked"), int64(1), now, now, now.Add(time.Minute), int64(9)},
		},
		rows: []map[string]driver.Value{
			{"id": int64(7), "message_id": []byte("m-7"), "exchange": []byte("gone"), "routing_key": []byte("k"),
				"content": []byte(`{"card":"4111-SECRET-PAYLOAD"}`), "status": []byte("FAILED"), "retry_count": int64(5),
				"max_retry_count": int64(5), "version": int64(2), "error_msg": []byte("publish: no exchange 'gone'"), "update_time": now},
		},
	}
}

func openFake(f *fakeReplica) *sql.DB { return sql.OpenDB(f) }

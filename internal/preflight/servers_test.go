package preflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// fakeSource is a source reduced to what checkSource asks: its global
// variables (SELECT @@name) and the relay user's grants. Anything else
// is an error, as a server without that variable says.
type fakeSource struct {
	vars   map[string]string
	grants []string
}

func (f *fakeSource) Connect(context.Context) (driver.Conn, error) { return fakeConn{f}, nil }
func (f *fakeSource) Driver() driver.Driver                        { return nil }

type fakeConn struct{ f *fakeSource }

func (fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no prepare") }
func (fakeConn) Close() error                        { return nil }
func (fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("fake: no transactions") }

func (c fakeConn) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	if q == "SHOW GRANTS" {
		rs := &fakeRows{}
		for _, g := range c.f.grants {
			rs.rows = append(rs.rows, g)
		}
		return rs, nil
	}
	if name, ok := strings.CutPrefix(q, "SELECT @@"); ok {
		if v, ok := c.f.vars[name]; ok {
			return &fakeRows{rows: []string{v}}, nil
		}
	}
	return nil, fmt.Errorf("fake: unknown %q", q)
}

type fakeRows struct{ rows []string }

func (r *fakeRows) Columns() []string { return []string{"v"} }
func (r *fakeRows) Close() error      { return nil }

func (r *fakeRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	dest[0], r.rows = r.rows[0], r.rows[1:]
	return nil
}

// The source's settings, one problem each, naming what to set.
func TestCheckSourceSettings(t *testing.T) {
	good := map[string]string{"log_bin": "1", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL",
		"gtid_mode": "ON", "log_slave_updates": "1"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range good {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	all := []string{"GRANT ALL PRIVILEGES ON *.* TO `relay`@`%`"}
	cases := []struct {
		name    string
		flavor  string
		vars    map[string]string
		grants  []string
		replica bool
		want    []string // severity and text, in order
	}{
		{"all set", binlog.FlavorMariaDB, good, all, false, nil},
		{"no binlog: nothing else is asked", binlog.FlavorMySQL, with("log_bin", "0", "binlog_format", "STATEMENT"), nil, false,
			[]string{"ERROR binary logging is off: start the server with log_bin"}},
		{"statement binlog, minimal image, no metadata", binlog.FlavorMariaDB, with("binlog_format", "STATEMENT", "binlog_row_image", "MINIMAL", "binlog_row_metadata", "MINIMAL"), all, false,
			[]string{"ERROR binlog_format is STATEMENT: set binlog_format=ROW", "ERROR binlog_row_image is MINIMAL: set binlog_row_image=FULL",
				`WARN binlog_row_metadata is "MINIMAL": set binlog_row_metadata=FULL`}},
		{"MySQL without GTID", binlog.FlavorMySQL, with("gtid_mode", "OFF"), all, false,
			[]string{"WARN gtid_mode is OFF: the relay resumes by file/position"}},
		{"MariaDB has no gtid_mode to ask", binlog.FlavorMariaDB, with("gtid_mode", "OFF"), all, false, nil},
		{"grants missing", binlog.FlavorMariaDB, good, []string{"GRANT USAGE ON *.* TO `relay`@`%`", "GRANT SELECT ON `app`.* TO `relay`@`%`"}, false,
			[]string{"ERROR the relay user lacks REPLICATION SLAVE to stream the binlog", "ERROR the relay user lacks REPLICATION CLIENT to read the binlog position"}},
		{"grants granted one by one", binlog.FlavorMySQL, good, []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`"}, false, nil},
		{"replica that does not log what it applies", binlog.FlavorMariaDB, with("log_slave_updates", "OFF"), all, true,
			[]string{"ERROR the source is a replica with log_slave_updates off"}},
		{"MySQL 8 names it log_replica_updates", binlog.FlavorMySQL, func() map[string]string {
			m := with("log_replica_updates", "ON")
			delete(m, "log_slave_updates")
			return m
		}(), all, true, nil},
		{"MySQL applier out of commit order", binlog.FlavorMySQL, with("replica_parallel_workers", "4", "replica_preserve_commit_order", "OFF"), all, true,
			[]string{"ERROR the source replica applies with replica_parallel_workers=4 and replica_preserve_commit_order OFF"}},
		{"MySQL applier in commit order", binlog.FlavorMySQL, with("replica_parallel_workers", "4", "replica_preserve_commit_order", "ON"), all, true,
			[]string{"INFO multi-threaded applier (replica_parallel_workers=4) with replica_preserve_commit_order ON"}},
		{"MySQL before 8.0.26: the slave_ names", binlog.FlavorMySQL, with("slave_parallel_workers", "2", "slave_preserve_commit_order", "0"), all, true,
			[]string{"ERROR the source replica applies with replica_parallel_workers=2"}},
		{"one applier", binlog.FlavorMySQL, with("replica_parallel_workers", "1", "replica_preserve_commit_order", "OFF"), all, true, nil},
		{"compression is said", binlog.FlavorMySQL, with("global.binlog_transaction_compression", "1"), all, false,
			[]string{"INFO binlog_transaction_compression is ON (compressed transactions are decoded)"}},
		{"partial JSON updates are said", binlog.FlavorMySQL, with("global.binlog_row_value_options", "PARTIAL_JSON"), all, false,
			[]string{"INFO binlog_row_value_options is PARTIAL_JSON (global): JSON updates by JSON_SET, JSON_REPLACE and JSON_REMOVE are logged as diffs, which the relay applies"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := config.MySQL{Host: "r1", Port: 3306, User: "relay"}
			db := sql.OpenDB(&fakeSource{vars: tc.vars, grants: tc.grants})
			defer db.Close()
			s := &Servers{Config: &config.Config{}, Log: zap.NewNop(), Source: db,
				SourceConfig: func() config.MySQL { return src },
				Flavor:       func(context.Context) (string, error) { return tc.flavor, nil },
				IsReplica:    func(context.Context) bool { return tc.replica },
			}
			ps, up := CheckSource(context.Background(), s)
			if !up {
				t.Fatal("the source answered, but CheckSource says it did not")
			}
			if len(ps) != len(tc.want) {
				t.Fatalf("problems:\n%s\nwant %d: %q", lines(ps), len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if got := string(ps[i].Severity) + " " + ps[i].Text; !strings.HasPrefix(got, w) || ps[i].Where != "source r1:3306" {
					t.Errorf("problem %d = %s, want %q on source r1:3306", i, ps[i], w)
				}
			}
		})
	}
}

// A source that does not say its flavour cannot be checked further.
func TestCheckSourceWithoutFlavor(t *testing.T) {
	db := sql.OpenDB(&fakeSource{})
	defer db.Close()
	s := &Servers{Config: &config.Config{}, Source: db,
		SourceConfig: func() config.MySQL { return config.MySQL{Host: "r1", Port: 3306} },
		Flavor: func(context.Context) (string, error) {
			return "", errors.New("source relay@r1:3306: detecting the flavour: no")
		},
	}
	ps, up := CheckSource(context.Background(), s)
	if up || len(ps) != 1 || ps[0].String() != "ERROR source r1:3306: source relay@r1:3306: detecting the flavour: no" {
		t.Fatalf("up %v, problems:\n%s", up, lines(ps))
	}
}

package app

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// fakeReplica is a source replica reduced to the answers the source
// selection, the checks and the replica watch ask for. A replica that is
// down refuses connections.
type fakeReplica struct {
	name string
	down atomic.Bool
	gtid string // gtid_binlog_pos
	io   string // Slave_IO_Running
}

func (r *fakeReplica) Connect(context.Context) (driver.Conn, error) {
	if r.down.Load() {
		return nil, errors.New(r.name + " is down")
	}
	return &fakeConn{r: r}, nil
}

func (r *fakeReplica) Driver() driver.Driver { return fakeDriver{} }

type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("fake: dial through the connector")
}

type fakeConn struct{ r *fakeReplica }

func (c *fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no prepare") }
func (c *fakeConn) Close() error                        { return nil }
func (c *fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("fake: no transactions") }

func (c *fakeConn) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	one := func(v string) driver.Rows { return &fakeRows{cols: []string{"v"}, rows: [][]driver.Value{{v}}} }
	switch q {
	case "SELECT 1":
		return one("1"), nil
	case "SELECT @@hostname":
		return one(c.r.name), nil
	case "SELECT @@gtid_binlog_pos":
		return one(c.r.gtid), nil
	case "SELECT CONCAT('server_id=', @@server_id)":
		return one("server_id=" + c.r.name), nil
	case "SHOW SLAVE STATUS":
		return &fakeRows{cols: []string{"Slave_IO_Running", "Slave_SQL_Running", "Master_Host", "Master_Port", "Seconds_Behind_Master"},
			rows: [][]driver.Value{{c.r.io, "Yes", "primary", "3306", "0"}}}, nil
	}
	return nil, fmt.Errorf("fake: %s does not answer %q", c.r.name, q)
}

type fakeRows struct {
	cols []string
	rows [][]driver.Value
}

func (r *fakeRows) Columns() []string { return r.cols }
func (r *fakeRows) Close() error      { return nil }

func (r *fakeRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}

// After a failover in the middle of a run, everything that names the
// source names the replica streamed from, and reads that one. pickSource
// used to copy its pick into cfg.Source while choose did not, so the checks
// and errors kept naming the replica picked at start; and an idle pooled
// connection kept answering /readyz's replica state from the old replica.
func TestFailoverNamesTheSourceStreamedFrom(t *testing.T) {
	r0 := &fakeReplica{name: "r0", gtid: "0-1-10", io: "Yes"}
	r0.down.Store(true) // down at start: pickSource skips it
	r1 := &fakeReplica{name: "r1", gtid: "0-1-10", io: "No"}
	r2 := &fakeReplica{name: "r2", gtid: "0-1-10", io: "Yes"}
	cfg := &config.Config{Source: config.MySQL{Host: "r0", Port: 3306, User: "relay", Flavor: "mariadb"}}
	replicas := map[string]*fakeReplica{}
	for i, r := range []*fakeReplica{r0, r1, r2} {
		cfg.Source.Hosts = append(cfg.Source.Hosts, fmt.Sprintf("%s:%d", r.name, 3306+i))
		replicas[r.name] = r
	}
	src, err := source.New(cfg.Source, zap.NewNop(), func(m config.MySQL, _ string) (driver.Connector, error) {
		if r := replicas[m.Host]; r != nil {
			return r, nil
		}
		return r0, nil // source: the first of the list
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &App{Cfg: cfg, Log: zap.NewNop(), src: src, Source: src.DB}
	defer a.Source.Close()
	ctx := context.Background()
	hostname := func() string {
		t.Helper()
		var h string
		if err := a.Source.QueryRowContext(ctx, "SELECT @@hostname").Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}

	a.src.Pick(ctx)
	if got := a.sourceAddr(); got != "r1:3307" {
		t.Fatalf("at start the source is %s, want r1:3307 (r0 is down)", got)
	}
	if h := hostname(); h != "r1" { // leaves an idle connection to r1 in the pool
		t.Fatalf("the source pool reads %s, want r1", h)
	}
	if id, err := a.ServerIdentity(ctx); err != nil || id != "server_id=r1" {
		t.Fatalf("identity at start = %q, %v; want server_id=r1", id, err)
	}
	server := a.src.CheckpointServer("server_id=r1")
	if got := server(); got != "server_id=r1" {
		t.Fatalf("checkpoints at start name %q, want server_id=r1", got)
	}

	// The binlog stream from r1 keeps failing: the reader asks choose.
	host, port, err := src.Failover()(ctx, binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-10"}, "r1:3307")
	if err != nil || host != "r2" || port != 3308 {
		t.Fatalf("choose = %s:%d, %v; want r2:3308", host, port, err)
	}

	if got := a.sourceAddr(); got != "r2:3308" {
		t.Errorf("after the failover the source is named %s, want r2:3308", got)
	}
	if h := hostname(); h != "r2" {
		t.Errorf("after the failover the source pool reads %s, want r2 (an idle connection to r1 was reused)", h)
	}
	if id, err := a.ServerIdentity(ctx); err != nil || id != "server_id=r2" {
		t.Errorf("identity after the failover = %q, %v; want server_id=r2", id, err)
	}
	if got := server(); got != "server_id=r2" {
		t.Errorf("checkpoints after the failover name %q, want server_id=r2 (the source streamed from)", got)
	}
	problems, _ := preflight.CheckSource(ctx, a.servers())
	if len(problems) == 0 {
		t.Fatal("checkSource found nothing to say about a fake replica")
	}
	for _, p := range problems {
		if p.Where != "source r2:3308" {
			t.Errorf("a check names %q, want source r2:3308: %s", p.Where, p)
		}
	}
	// /readyz: r1's stopped IO thread must not be reported under r2's name.
	a.replica.Poll(ctx, replicaServers{a}, a.Log)
	if st, ok := a.replica.State(); !ok || st.Addr != "r2:3308" || st.IO != "Yes" {
		t.Errorf("replica state after the failover = %+v, want r2:3308 replicating", st)
	}
	if why := a.replica.Reasons(replicaServers{a}, 0); len(why) != 0 {
		t.Errorf("/readyz reasons after the failover to a healthy replica: %q", why)
	}
}

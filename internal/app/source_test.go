package app

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

func testSources(t *testing.T, hosts ...string) (*sources, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	s, err := newSources(config.MySQL{Hosts: hosts, Port: 3306, User: "root"}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	return s, logs
}

// Without GTID there is no failover: file/position mean nothing on another
// server. The relay stays on its source and says why.
func TestFailoverRefusedWithoutGTID(t *testing.T) {
	s, logs := testSources(t, "10.255.0.1:3306", "10.255.0.2")
	pos := binlog.Position{Flavor: binlog.FlavorMariaDB, File: "binlog.000007", Pos: 1234}
	host, port, err := s.choose(context.Background(), pos, "10.255.0.1:3306")
	if err != nil || host != "10.255.0.1" || port != 3306 {
		t.Fatalf("choose = %s:%d, %v; want the same source", host, port, err)
	}
	found := logs.FilterMessageSnippet("source failover refused").All()
	if len(found) != 1 || !strings.Contains(found[0].Message, "gtid_mode=ON") {
		t.Fatalf("want one clear refusal naming the fix, got %v", found)
	}
	if s.hosts[1].Host != "10.255.0.2" || s.hosts[1].Port != 3306 {
		t.Fatalf("second host parsed as %s:%d", s.hosts[1].Host, s.hosts[1].Port)
	}
}

// Failover goes to the next replica whose binlog holds the position, and
// waits (here: until ctx ends) when none does.
func TestFailoverChoosesReplicaWithPosition(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the stack's replicas (scripts/stack.sh up)")
	}
	// internal/testenv imports this package: the stack's addresses here.
	r1h, r1p, r2h, r2p := "127.0.0.1", 3308, "127.0.0.1", 3309
	s, logs := testSources(t, r1h+":"+itoa(r1p), r2h+":"+itoa(r2p))
	have, err := s.query(context.Background(), 1, "SELECT @@gtid_binlog_pos")
	if err != nil {
		t.Fatalf("replica2 is not reachable (scripts/stack.sh up): %v", err)
	}
	host, port, err := s.choose(context.Background(), binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: have}, r1h+":"+itoa(r1p))
	if err != nil || host != r2h || int(port) != r2p {
		t.Fatalf("choose = %s:%d, %v; want replica2 %s:%d", host, port, err, r2h, r2p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	ahead := binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-999999999"}
	if _, _, err := s.choose(ctx, ahead, r2h+":"+itoa(r2p)); err == nil {
		t.Fatal("chose a replica that lacks the position")
	}
	if logs.FilterMessageSnippet("replica is behind the relay's position").Len() == 0 {
		t.Fatal("no log line says the replicas lag")
	}
}

func itoa(n int) string { return fmt.Sprint(n) }

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
	s := &sources{log: zap.NewNop(), behind: map[int]string{}}
	cfg := &config.Config{Source: config.MySQL{Host: "r0", Port: 3306, User: "relay", Flavor: "mariadb"}}
	for i, r := range []*fakeReplica{r0, r1, r2} {
		cfg.Source.Hosts = append(cfg.Source.Hosts, fmt.Sprintf("%s:%d", r.name, 3306+i))
		s.hosts = append(s.hosts, config.MySQL{Host: r.name, Port: 3306 + i, User: "relay", Flavor: "mariadb"})
		s.conns = append(s.conns, r)
	}
	a := &App{Cfg: cfg, Log: zap.NewNop(), src: s, Source: sql.OpenDB(s)}
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

	a.pickSource(ctx)
	if got := a.sourceAddr(); got != "r1:3307" {
		t.Fatalf("at start the source is %s, want r1:3307 (r0 is down)", got)
	}
	if h := hostname(); h != "r1" { // leaves an idle connection to r1 in the pool
		t.Fatalf("the source pool reads %s, want r1", h)
	}
	if id, err := a.ServerIdentity(ctx); err != nil || id != "server_id=r1" {
		t.Fatalf("identity at start = %q, %v; want server_id=r1", id, err)
	}
	server := a.checkpointServer("server_id=r1")
	if got := server(); got != "server_id=r1" {
		t.Fatalf("checkpoints at start name %q, want server_id=r1", got)
	}

	// The binlog stream from r1 keeps failing: the reader asks choose.
	host, port, err := s.choose(ctx, binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-10"}, "r1:3307")
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
	c := &checker{a: a}
	c.checkSource(ctx)
	if len(c.problems) == 0 {
		t.Fatal("checkSource found nothing to say about a fake replica")
	}
	for _, p := range c.problems {
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

package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Topology is the stack's switch1, switch2 and switch3 servers wired for
// one test: switch1 the primary, switch2 (the relay's source) and switch3
// its replicas. Tests that change replication itself (a switchover, a
// stopped SQL thread, purged binlogs) use it instead of the shared servers.
// One test at a time holds it, across test binaries too (a file lock).
type Topology struct {
	DB      string             // the test's database, on every server
	Servers map[string]*sql.DB // switch1, switch2, switch3 (no database selected)
	DSN     map[string]string  // by the same names
	Primary string             // the server taking writes now
	conns   map[string]*sql.DB // on DB, by name
}

var topologyNames = []string{"switch1", "switch2", "switch3"}

// NewTopology resets the three servers (replication off, binlogs and GTID
// state emptied), wires switch1 -> switch2 and switch1 -> switch3 by GTID,
// and creates a database from the DDL files on switch1.
func NewTopology(t testing.TB, ddlFiles ...string) *Topology {
	t.Helper()
	lockTopology(t)
	tp := &Topology{DB: UniqueName("t"), Servers: map[string]*sql.DB{}, conns: map[string]*sql.DB{},
		DSN: map[string]string{"switch1": Switch1DSN, "switch2": Switch2DSN, "switch3": Switch3DSN}, Primary: "switch1"}
	for _, n := range topologyNames {
		tp.Servers[n] = Open(t, tp.DSN[n], "")
	}
	for _, n := range topologyNames {
		tp.exec(t, n, StopReplicaSQL)
		tp.exec(t, n, ResetReplicaSQL)
	}
	for _, n := range topologyNames {
		rows, err := tp.Servers[n].Query("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 't\\_%'")
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		var old []string
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			old = append(old, s)
		}
		rows.Close()
		for _, s := range old {
			tp.exec(t, n, "DROP DATABASE `"+s+"`") // binlogged, but RESET MASTER follows with replication off
		}
		for _, q := range Current.ResetBinlogSQL() {
			tp.exec(t, n, q)
		}
		tp.exec(t, n, "SET GLOBAL read_only = 0")
	}
	tp.Replicate(t, "switch2", "switch1")
	tp.Replicate(t, "switch3", "switch1")
	tp.exec(t, "switch1", "CREATE DATABASE "+tp.DB)
	db := tp.On(t, "switch1")
	for _, f := range ddlFiles {
		ddl, err := os.ReadFile(RepoPath(f))
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		if _, err := db.Exec(string(ddl)); err != nil {
			t.Fatalf("switch1: %s: %v", f, err)
		}
	}
	tp.WaitReplicated(t, "switch2", 30*time.Second)
	tp.WaitReplicated(t, "switch3", 30*time.Second)
	return tp
}

// lockTopology holds the flavour's switch servers for the test's life.
func lockTopology(t testing.TB) {
	t.Helper()
	lockFile(t, "binlog-relay-topology-"+Current.Name+".lock", "the switch topology")
}

// LockShared holds, for the test's life, a server that every flavour's
// tests use and that the test stops or fails over (the Redis Sentinel group
// and the Redis Cluster: LockRedisTopologies). make test runs the flavours'
// suites side by side (scripts/testlanes.sh); the lock, a file lock like
// the switch topology's, keeps such tests of two test binaries apart.
func LockShared(t testing.TB, what string) {
	t.Helper()
	lockFile(t, "binlog-relay-shared-"+what+".lock", what)
}

// LockRedisTopologies holds the stack's Sentinel group and Redis Cluster
// (LockShared): a test that kills or fails over their nodes, or one that
// counts on their replicas acknowledging a write, takes it.
func LockRedisTopologies(t testing.TB) {
	t.Helper()
	LockShared(t, "redis-topologies")
}

// LockHeavy is taken by a test that drives the machine hard: a full-rate
// stream of tens of thousands of rows, a 100,000-row transaction, SIGKILL
// loops, the chaos run. make test's lanes then run one such test at a
// time, so none runs on a machine the other lane loads as hard: a binlog
// path slowed past the sweeper's grace period would publish rows twice,
// which these tests count.
func LockHeavy(t testing.TB) {
	t.Helper()
	LockShared(t, "heavy")
}

func lockFile(t testing.TB, name, what string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), name), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("locking %s: %v", what, err)
	}
	t.Cleanup(func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); _ = f.Close() })
}

func (tp *Topology) exec(t testing.TB, name, q string) {
	t.Helper()
	if _, err := tp.Servers[name].Exec(q); err != nil {
		t.Fatalf("%s: %s: %v", name, q, err)
	}
}

// Exec runs a statement on a server, failing the test on error.
func (tp *Topology) Exec(t testing.TB, name, q string, args ...any) {
	t.Helper()
	if _, err := tp.Servers[name].Exec(q, args...); err != nil {
		t.Fatalf("%s: %.80q: %v", name, q, err)
	}
}

// On is a connection to the test's database on a server.
func (tp *Topology) On(t testing.TB, name string) *sql.DB {
	t.Helper()
	if db, ok := tp.conns[name]; ok {
		return db
	}
	db := Open(t, tp.DSN[name], tp.DB)
	tp.conns[name] = db
	return db
}

// Replicate makes replica replicate from master by GTID, from the
// position the replica has (its own binlog included, which is what a
// promoted or re-pointed server needs: MariaDB's current_pos, MySQL's auto
// position).
func (tp *Topology) Replicate(t testing.TB, replica, master string) {
	t.Helper()
	_, port := HostPort(tp.DSN[master])
	tp.exec(t, replica, StopReplicaSQL)
	tp.exec(t, replica, Current.ChangeSourceSQL(port))
	tp.exec(t, replica, StartReplicaSQL)
	WaitFor(t, 30*time.Second, fmt.Sprintf("%s to replicate from %s", replica, master), func() (bool, string) {
		row, err := Current.ReplicaStatus(context.Background(), tp.Servers[replica])
		if err != nil {
			return false, err.Error()
		}
		return row["Slave_IO_Running"] == "Yes" && row["Slave_SQL_Running"] == "Yes",
			fmt.Sprintf("io=%s sql=%s %s%s", row["Slave_IO_Running"], row["Slave_SQL_Running"], row["Last_IO_Error"], row["Last_SQL_Error"])
	})
}

// WaitReplicated waits until replica has what the current primary logged.
func (tp *Topology) WaitReplicated(t testing.TB, replica string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	pos, err := Current.GTIDPos(ctx, tp.Servers[tp.Primary])
	if err != nil {
		t.Fatalf("%s: reading %s: %v", tp.Primary, Current.GTIDVar(), err)
	}
	if err := Current.WaitApplied(ctx, tp.Servers[replica], pos, within); err != nil {
		t.Fatalf("%s did not reach %s's %s: %v", replica, tp.Primary, pos, err)
	}
}

// Switchover makes newPrimary the primary: the caller has stopped writes;
// every server catches up, newPrimary stops replicating, and the others
// replicate from it. Writes then carry newPrimary's server_id in domain 0.
func (tp *Topology) Switchover(t testing.TB, newPrimary string) {
	t.Helper()
	for _, n := range topologyNames {
		if n != tp.Primary {
			tp.WaitReplicated(t, n, 30*time.Second)
		}
	}
	tp.exec(t, newPrimary, StopReplicaSQL)
	tp.exec(t, newPrimary, ResetReplicaSQL)
	old := tp.Primary
	tp.Primary = newPrimary
	for _, n := range topologyNames {
		if n != newPrimary {
			tp.Replicate(t, n, newPrimary)
		}
	}
	_ = old
}

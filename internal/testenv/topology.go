package testenv

import (
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
		tp.exec(t, n, "STOP ALL SLAVES")
		tp.exec(t, n, "RESET SLAVE ALL")
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
		tp.exec(t, n, "RESET MASTER")
		tp.exec(t, n, "SET GLOBAL gtid_slave_pos = ''")
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

// lockTopology holds a file lock for the test's life.
func lockTopology(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "binlog-relay-topology.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("locking the switch topology: %v", err)
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
// position the replica has (current_pos: its own binlog included, which is
// what a promoted or re-pointed server needs).
func (tp *Topology) Replicate(t testing.TB, replica, master string) {
	t.Helper()
	_, port := HostPort(tp.DSN[master])
	tp.exec(t, replica, "STOP SLAVE")
	tp.exec(t, replica, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=current_pos", port))
	tp.exec(t, replica, "START SLAVE")
	Eventually(t, 30*time.Second, func() bool {
		var io, sqlT string
		row := map[string]*string{"Slave_IO_Running": &io, "Slave_SQL_Running": &sqlT}
		readSlaveStatus(tp.Servers[replica], row)
		return io == "Yes" && sqlT == "Yes"
	}, "%s does not replicate from %s", replica, master)
}

// WaitReplicated waits until replica has what the current primary logged.
func (tp *Topology) WaitReplicated(t testing.TB, replica string, within time.Duration) {
	t.Helper()
	var pos string
	if err := tp.Servers[tp.Primary].QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatalf("%s: reading gtid_binlog_pos: %v", tp.Primary, err)
	}
	var ok sql.NullInt64
	err := tp.Servers[replica].QueryRow("SELECT MASTER_GTID_WAIT(?, ?)", pos, within.Seconds()).Scan(&ok)
	if err != nil || !ok.Valid || ok.Int64 != 0 {
		t.Fatalf("%s did not reach %s's %s within %s (err %v, result %v)", replica, tp.Primary, pos, within, err, ok)
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
	tp.exec(t, newPrimary, "STOP SLAVE")
	tp.exec(t, newPrimary, "RESET SLAVE ALL")
	old := tp.Primary
	tp.Primary = newPrimary
	for _, n := range topologyNames {
		if n != newPrimary {
			tp.Replicate(t, n, newPrimary)
		}
	}
	_ = old
}

// readSlaveStatus fills the named columns of SHOW SLAVE STATUS.
func readSlaveStatus(db *sql.DB, want map[string]*string) {
	rows, err := db.Query("SHOW SLAVE STATUS")
	if err != nil {
		return
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return
	}
	raw := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	if rows.Scan(ptrs...) != nil {
		return
	}
	for i, c := range cols {
		if p, ok := want[c]; ok {
			*p = raw[i].String
		}
	}
}

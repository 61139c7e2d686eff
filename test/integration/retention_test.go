package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// `check` against a source that keeps its binlog for one hour warns with
// the figure, the setting, the floor (source.min_binlog_retention, 24h by
// default) and why it matters; a floor under the retention, or 0s, says
// nothing about it.
func TestCheckWarnsOnShortBinlogRetention(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	replica := testenv.Open(t, testenv.ReplicaDSN, "")
	var old string
	if err := replica.QueryRow("SELECT @@GLOBAL.binlog_expire_logs_seconds").Scan(&old); err != nil {
		t.Fatal(err)
	}
	// MariaDB sets expire_logs_days along with it, and restores it with it.
	if _, err := replica.Exec("SET GLOBAL binlog_expire_logs_seconds = 3600"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := replica.Exec("SET GLOBAL binlog_expire_logs_seconds = " + old); err != nil {
			t.Errorf("restoring binlog_expire_logs_seconds = %s on the replica: %v", old, err)
		}
	})
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	withFloor := func(floor string) string {
		source := fmt.Sprintf("{host: %s, port: %d, user: root}", sh, sp)
		if floor != "" {
			source = fmt.Sprintf("{host: %s, port: %d, user: root, min_binlog_retention: %s}", sh, sp, floor)
		}
		return relaytest.Config{Name: testenv.UniqueName("ret"), Tables: relaytest.SeedTable(db.Name),
			Sections: map[string]string{"source": source}}.YAML()
	}

	lines := runCheck(t, withFloor(""))
	if !findLine(lines, "WARN source", "binlog retention is 1h (binlog_expire_logs_seconds=3600), under source.min_binlog_retention (24h)",
		"cannot resume from its checkpoint", "sweeper", "binlog_expire_logs_seconds = 86400") {
		t.Fatalf("no warning about the 1h binlog retention in:\n%s", strings.Join(lines, "\n"))
	}

	lines = runCheck(t, withFloor("2h"))
	if !findLine(lines, "WARN source", "binlog retention is 1h", "source.min_binlog_retention (2h)", "= 7200") {
		t.Fatalf("no warning against a 2h floor in:\n%s", strings.Join(lines, "\n"))
	}

	for _, floor := range []string{"30m", "0s"} {
		lines = runCheck(t, withFloor(floor))
		if findLine(lines, "binlog retention") {
			t.Fatalf("min_binlog_retention %s, yet:\n%s", floor, strings.Join(lines, "\n"))
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "ERROR") {
				t.Fatalf("min_binlog_retention %s: %s", floor, l)
			}
		}
	}
}

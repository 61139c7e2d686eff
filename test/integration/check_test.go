package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

func runCheck(t *testing.T, yaml string) []string {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), os.LookupEnv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := app.Open(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var lines []string
	for _, p := range a.Check(context.Background()) {
		lines = append(lines, p.String())
	}
	return lines
}

func findLine(lines []string, parts ...string) bool {
	for _, l := range lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

// Test 8: `check` reports each misconfiguration on its own line, saying what
// to change.
func TestCheckReportsMisconfiguration(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")

	t.Run("healthy stack", func(t *testing.T) {
		lines := runCheck(t, relaytest.RelayConfig(testenv.UniqueName("chk"), relaytest.SeedTable(db.Name), ""))
		for _, l := range lines {
			if strings.HasPrefix(l, "ERROR") {
				t.Fatalf("unexpected problem on the healthy stack: %s", l)
			}
		}
	})

	t.Run("statement-based binlog", func(t *testing.T) {
		// The stack's "misconf" server runs with binlog_format=STATEMENT.
		mis := testenv.Open(t, testenv.MisconfDSN, "")
		name := testenv.UniqueName("mis")
		if _, err := mis.Exec("CREATE DATABASE " + name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = mis.Exec("DROP DATABASE " + name) })
		ddl, _ := os.ReadFile(testenv.RepoPath("schema/producer_message.sql"))
		if _, err := mis.Exec("USE " + name + "; " + string(ddl)); err != nil {
			t.Fatal(err)
		}
		h, p := testenv.HostPort(testenv.MisconfDSN)
		yaml := strings.Replace(relaytest.RelayConfig(testenv.UniqueName("chk"), relaytest.SeedTable(name), ""),
			fmt.Sprintf("source: {host: 127.0.0.1, port: %d, user: root}", replicaPort()), fmt.Sprintf("source: {host: %s, port: %d, user: root}", h, p), 1)
		lines := runCheck(t, yaml)
		if !findLine(lines, "ERROR", "binlog_format is STATEMENT", "set binlog_format=ROW") {
			t.Fatalf("no line about binlog_format in:\n%s", strings.Join(lines, "\n"))
		}
	})

	t.Run("missing table", func(t *testing.T) {
		yaml := relaytest.RelayConfig(testenv.UniqueName("chk"), fmt.Sprintf("  - {preset: producer-message, schema: %s, name: no_such_outbox}\n", db.Name), "")
		lines := runCheck(t, yaml)
		if !findLine(lines, "ERROR", db.Name+".no_such_outbox does not exist") {
			t.Fatalf("no line about the missing table in:\n%s", strings.Join(lines, "\n"))
		}
	})

	t.Run("missing trace context column", func(t *testing.T) {
		yaml := relaytest.RelayConfig(testenv.UniqueName("chk"), fmt.Sprintf("  - {preset: producer-message, schema: %s, trace: {format: traceparent}}\n", db.Name), "")
		lines := runCheck(t, yaml)
		if !findLine(lines, "ERROR", `no column "traceparent"`, "trace.column") {
			t.Fatalf("no line about the missing trace column in:\n%s", strings.Join(lines, "\n"))
		}
	})

	t.Run("user without replication rights", func(t *testing.T) {
		user := testenv.UniqueName("norepl")
		db.Exec(t, fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY 'pw-%s'", user, user))
		db.Exec(t, fmt.Sprintf("GRANT SELECT, UPDATE ON %s.* TO '%s'@'127.0.0.1'", db.Name, user))
		t.Cleanup(func() { _, _ = db.Primary.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'127.0.0.1'", user)) })
		db.WaitReplicated(t, 30e9)
		yaml := strings.Replace(relaytest.RelayConfig(testenv.UniqueName("chk"), relaytest.SeedTable(db.Name), ""),
			fmt.Sprintf("port: %d, user: root}", replicaPort()), fmt.Sprintf("port: %d, user: %s, password: pw-%s}", replicaPort(), user, user), 1)
		lines := runCheck(t, yaml)
		if !findLine(lines, "ERROR", "lacks REPLICATION SLAVE", "GRANT REPLICATION SLAVE") {
			t.Fatalf("no line about REPLICATION SLAVE in:\n%s", strings.Join(lines, "\n"))
		}
		if !findLine(lines, "ERROR", "lacks REPLICATION CLIENT") {
			t.Fatalf("no line about REPLICATION CLIENT in:\n%s", strings.Join(lines, "\n"))
		}
		for _, l := range lines {
			if strings.Contains(l, "pw-"+user) {
				t.Fatalf("a check line shows the password: %s", l)
			}
		}
	})
}

// A table whose route.time_zone is not the primary's zone, with DATETIME
// columns the primary fills: check warns, naming the key, the columns and
// the zone to set. Not for a table without DATETIME columns (Eventuate's
// epoch milliseconds), nor for one left at UTC on a primary at UTC.
func TestCheckWarnsOfARouteTimeZoneOtherThanThePrimarys(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/producer_message.sql", "schema/eventuate_message.sql")
	if off := utcOffset(t, db.Primary); off != 0 {
		t.Fatalf("the primary is %s from UTC: the test needs the stack's primary at UTC", off)
	}
	tables := fmt.Sprintf("  - {preset: producer-message, schema: %[1]s, route: {time_zone: Asia/Tokyo}}\n"+
		"  - {preset: eventuate, schema: %[1]s, route: {time_zone: Asia/Tokyo}}\n", db.Name)
	lines := runCheck(t, relaytest.RelayConfig(testenv.UniqueName("chk"), tables, ""))
	if !findLine(lines, "WARN", "tables[0].route.time_zone is Asia/Tokyo", "primary's clock reads +00:00",
		db.Name+".producer_message (create_time, next_retry_time, update_time)", "set tables[0].route.time_zone to UTC") {
		t.Errorf("check does not warn of tables[0].route.time_zone:\n%s", strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.Contains(l, "route.time_zone") {
			t.Logf("check: %s", l)
		}
	}
	if findLine(lines, "tables[1].route.time_zone") {
		t.Errorf("check warns of the zone of a table without DATETIME columns:\n%s", strings.Join(lines, "\n"))
	}
	lines = runCheck(t, relaytest.RelayConfig(testenv.UniqueName("chk"), relaytest.SeedTable(db.Name), ""))
	if findLine(lines, "route.time_zone") {
		t.Errorf("check warns of route.time_zone left at UTC on a primary at UTC:\n%s", strings.Join(lines, "\n"))
	}
}

// replicaPort is the port of the stack's replica, the relay's source.
func replicaPort() int {
	_, p := testenv.HostPort(testenv.ReplicaDSN)
	return p
}

package integration

// binlog-relay init against the servers: the config it writes for each
// seed table passes check and relays rows end to end, as written; a table
// it cannot map is refused with exit 2, naming what is missing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// initSeed is one seed table: its DDL as the design documents write it,
// the preset init must recognise, and an insert of one row to the
// exchange ex (n makes the row's ids unique).
type initSeed struct {
	ddl, table, preset string
	insert             func(t *testing.T, db *testenv.DB, ex string, n int)
	sent               string // counts the rows marked sent; "" for a table without a status
}

var initSeeds = []initSeed{
	{seedDDL, "producer_message", "producer-message", func(t *testing.T, db *testenv.DB, ex string, n int) {
		db.Exec(t, `INSERT INTO producer_message (id, message_id, exchange, routing_key, content, status, create_time)
			VALUES (?, ?, ?, 'order.created', ?, 'PENDING', NOW())`, 1811234567890000000+int64(n)*4096, fmt.Sprintf("pm-%d", n), ex, fmt.Sprintf(`{"n":%d}`, n))
	}, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT'"},
	{seedDDL, "local_message", "local-message", func(t *testing.T, db *testenv.DB, ex string, n int) {
		db.Exec(t, `INSERT INTO local_message (biz_id, biz_type, exchange, routing_key, message_body) VALUES ('order-1', 'ORDER_PAY', ?, 'order.paid', ?)`,
			ex, fmt.Sprintf(`{"n":%d}`, n))
	}, "SELECT COUNT(*) FROM local_message WHERE status = 1"},
	{seedDDL, "t_message_record", "message-record", func(t *testing.T, db *testenv.DB, ex string, n int) {
		db.Exec(t, `INSERT INTO t_message_record (message_id, topic, tag, message_body, status, create_time) VALUES (?, ?, 'TagA', ?, 'PENDING', NOW())`,
			fmt.Sprintf("mr-%d", n), ex, fmt.Sprintf(`{"n":%d}`, n))
	}, "SELECT COUNT(*) FROM t_message_record WHERE status = 'SENT'"},
	{"schema/debezium_outbox.sql", "outbox", "debezium", func(t *testing.T, db *testenv.DB, ex string, n int) {
		db.Exec(t, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (UUID(), ?, 'order-1', 'OrderCreated', ?)`,
			ex, fmt.Sprintf(`{"n":%d}`, n))
	}, ""},
	{"schema/eventuate_message.sql", "message", "eventuate", func(t *testing.T, db *testenv.DB, ex string, n int) {
		db.Exec(t, `INSERT INTO message (id, destination, headers, payload, creation_time) VALUES (?, ?, '{"PARTITION_ID":"1"}', ?, UNIX_TIMESTAMP() * 1000)`,
			fmt.Sprintf("ev-%d", n), ex, fmt.Sprintf(`{"n":%d}`, n))
	}, "SELECT COUNT(*) FROM message WHERE published = 1"},
}

// initUser creates a relay user with a password and the grants of
// schema/grants.sql on db, dropped at the end; init and the relay read
// its password from $RELAY_DB_PASSWORD, as init's config says.
func initUser(t *testing.T, db *testenv.DB) string {
	t.Helper()
	user, pw := testenv.UniqueName("init"), "pw-"+testenv.UniqueName("x")
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, pw),
		fmt.Sprintf("GRANT %s ON *.* TO '%s'@'%%'", replicationGrants(), user),
		fmt.Sprintf("GRANT SELECT, UPDATE ON `%s`.* TO '%s'@'%%'", db.Name, user),
	} {
		if _, err := db.Primary.Exec(q); err != nil {
			t.Fatalf("%s: %v", strings.Replace(q, pw, "***", 1), err)
		}
	}
	t.Cleanup(func() { _, _ = db.Primary.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", user)) })
	db.WaitReplicated(t, 30*time.Second)
	t.Setenv("RELAY_DB_PASSWORD", pw)
	return user
}

// runInit runs init as the command does, on the stack's servers, and
// returns the config it wrote and what it said.
func runInit(t *testing.T, user string, tables ...string) (yaml, said string, err error) {
	t.Helper()
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	ph, pp := testenv.HostPort(testenv.PrimaryDSN)
	o := command.InitOptions{
		Source:  fmt.Sprintf("%s@tcp(%s:%d)/", user, sh, sp),
		Primary: fmt.Sprintf("mysql://%s@%s:%d/", user, ph, pp),
		Tables:  tables,
		Broker:  testenv.AMQPURL, // guest:guest: written as ${RELAY_BROKER_PASSWORD}
		Redis:   testenv.RedisAddr,
	}
	var out, errb bytes.Buffer
	lint := func(raw []byte) ([]preflight.Problem, error) {
		cfg, absent, err := config.ParseWith(raw, os.LookupEnv, config.LoadOptions{SkipAbsentFiles: true})
		if err != nil {
			return nil, err
		}
		return preflight.Lint(cfg, app.ConfigChecks(), absent...), nil
	}
	err = command.Init(context.Background(), o, os.LookupEnv, lint, &out, &errb)
	return out.String(), errb.String(), err
}

// For each seed table as the design documents write it, init recognises
// its preset; the config it writes, as written, passes check (grants,
// settings, the table) and relays rows: published once, marked sent.
func TestInitSeedTablesCheckAndRelay(t *testing.T) {
	testenv.Integration(t)
	t.Setenv("RELAY_BROKER_PASSWORD", "guest")
	for _, s := range initSeeds {
		t.Run(s.table, func(t *testing.T) {
			db := testenv.NewDB(t, s.ddl)
			user := initUser(t, db)
			yaml, said, err := runInit(t, user, db.Name+"."+s.table)
			if err != nil {
				t.Fatalf("init: %v\n%s", err, said)
			}
			if !strings.Contains(yaml, "  - preset: "+s.preset+"\n") || !strings.Contains(said, "recognised the "+s.preset+" preset") {
				t.Fatalf("init did not recognise %s:\n%s\n%s", s.preset, yaml, said)
			}
			if strings.Contains(yaml+said, os.Getenv("RELAY_DB_PASSWORD")) || strings.Contains(yaml, "guest:guest") {
				t.Fatalf("a password is in init's output:\n%s\n%s", yaml, said)
			}
			for _, l := range runCheck(t, yaml) {
				if strings.HasPrefix(l, "ERROR") {
					t.Errorf("check: %s", l)
				}
			}
			if t.Failed() {
				t.Fatalf("config:\n%s", yaml)
			}
			br, got := testenv.NewCollectedBroker(t)
			relaytest.StartRelay(t, yaml)
			const rows = 5
			for n := range rows {
				s.insert(t, db, br.Exchange, n)
			}
			msgs := dropinWait(t, got, rows, 60*time.Second)
			for n, m := range msgs {
				// Eventuate's envelope carries the payload as a JSON string;
				// MySQL prints a JSON column with a space after the colon.
				body := strings.ReplaceAll(string(m.Body), " ", "")
				want, quoted := fmt.Sprintf(`{"n":%d}`, n), fmt.Sprintf(`{\"n\":%d}`, n)
				if !strings.Contains(body, want) && !(s.preset == "eventuate" && strings.Contains(body, quoted)) {
					t.Errorf("message %d: body %q, want %s (in commit order)", n, m.Body, want)
				}
			}
			if s.sent != "" {
				dropinEventuallyCount(t, db, rows, s.sent)
			}
		})
	}
}

// init refuses a table it cannot map, exit 2, naming what is missing, and
// a table that is not there; the binary says it on stderr and writes no
// config.
func TestInitRefusesUnmappableTables(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "testdata/init/unmappable.sql", seedDDL)
	user := initUser(t, db)
	for table, want := range map[string]string{
		"no_key":        "no primary key (nor a unique NOT NULL column)",
		"composite_key": "no single-column primary key (it has one over tenant, id)",
		"no_payload":    "no payload column",
		"t_msg_dedup":   "no payload column",
		"nope":          "no such table on the source",
	} {
		yaml, _, err := runInit(t, user, db.Name+"."+table)
		if _, ok := errors.AsType[*command.InitRefusedError](err); !ok || !strings.Contains(err.Error(), want) || yaml != "" {
			t.Errorf("%s: %v, want it refused saying %q; wrote %q", table, err, want, yaml)
		}
	}
	// The binary: exit 2, the reason on stderr, nothing on stdout.
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	cmd := exec.Command(relaytest.Binary(t), "init", "--source", fmt.Sprintf("%s@tcp(%s:%d)/", user, sh, sp),
		"--primary", fmt.Sprintf("%s@tcp(%s:%d)/", user, sh, sp), "--table", db.Name+".neither")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	want := db.Name + ".neither cannot be relayed: no primary key"
	if cmd.ProcessState.ExitCode() != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "; no payload column") {
		t.Fatalf("binlog-relay init on an unmappable table: %v, stdout %q, stderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("stderr: %s", stderr.String())
}

package integration

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// caching_sha2_password without TLS needs the server's RSA public key for a
// login the server has not cached; the stack's MySQL "misconf" server has
// none. check says what is wrong and what to do, and the binlog reader
// reports the same error and retries (it used to crash the process: go-mysql
// panics on the empty key).
func TestSourceWithoutAnRSAKeyIsAClearError(t *testing.T) {
	testenv.Integration(t)
	testenv.Only(t, true, "caching_sha2_password and its RSA key are MySQL's")
	mis := testenv.Open(t, testenv.MisconfDSN, "")
	user := testenv.UniqueName("nokey")
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED WITH caching_sha2_password BY 'pw-%s'", user, user),
		fmt.Sprintf("GRANT ALL ON *.* TO '%s'@'127.0.0.1'", user),
	} {
		if _, err := mis.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = mis.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'127.0.0.1'", user)) })
	var key string
	if err := mis.QueryRow("SHOW STATUS LIKE 'Caching_sha2_password_rsa_public_key'").Scan(new(string), &key); err != nil || key != "" {
		t.Fatalf("the misconf server has an RSA public key (%v): the test would prove nothing; restart it with scripts/stack.sh restart mysql-9.7/misconf", err)
	}
	const want = "the server cannot take the password without TLS"

	h, p := testenv.HostPort(testenv.MisconfDSN)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	yaml := strings.Replace(relaytest.RelayConfig(testenv.UniqueName("chk"), relaytest.SeedTable(db.Name), ""),
		fmt.Sprintf("source: {host: 127.0.0.1, port: %d, user: root}", replicaPort()),
		fmt.Sprintf("source: {host: %s, port: %d, user: %s, password: pw-%s}", h, p, user, user), 1)
	lines := runCheck(t, yaml)
	if !findLine(lines, "ERROR", "source", want, "source.tls") {
		t.Fatalf("no line about the missing RSA key in:\n%s", strings.Join(lines, "\n"))
	}

	var logs bytes.Buffer
	tb, err := outbox.Preset("producer-message")
	if err != nil {
		t.Fatal(err)
	}
	tb.Schema, tb.Name = db.Name, "producer_message"
	if err := tb.Validate("table"); err != nil {
		t.Fatal(err)
	}
	r, err := binlog.New(binlog.Config{Host: h, Port: uint16(p), User: user, Password: "pw-" + user, Flavor: binlog.FlavorMySQL,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond},
		[]*outbox.Table{&tb}, binlog.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	events := make(chan binlog.Event, 16)
	err = r.Run(ctx, binlog.Position{Flavor: binlog.FlavorMySQL, File: "binlog.000001", Pos: 4}, events)
	if ctx.Err() == nil {
		t.Fatalf("the reader stopped on its own (%v); want it to retry until stopped", err)
	}
	if n := strings.Count(logs.String(), want); n < 2 {
		t.Fatalf("%d reconnect lines name the missing key; want at least 2:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "pw-"+user) {
		t.Fatal("the password is in the reader's log")
	}
}

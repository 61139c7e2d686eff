package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const reconcileConfig = `source: {host: db-replica.invalid, user: relay}
primary: {host: db-primary.invalid, user: relay}
broker: {url: "amqp://relay:x@mq.invalid:5672/"}
tables:
  - {preset: producer-message, schema: shop}
  - {preset: debezium, schema: shop}
reconcile:
  interval: 1h
  consumers:
    - {name: inventory, schema: inventory, mysql: {host: inbox-replica.invalid, user: reader}}
`

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// lint covers the reconcile section: its fields (exit 2, the field named)
// and what a run would leave out (a warning, exit 0).
func TestLintReconcile(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"lint", "--config", writeConfig(t, reconcileConfig)}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "WARN shop.outbox: reconcile skips this table: it has no columns.created_at") {
		t.Fatalf("exit %d:\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	bad := strings.Replace(reconcileConfig, "user: reader}", "user: reader, tls: {ca_file: /x.pem}}", 1)
	code = run([]string{"lint", "--config", writeConfig(t, bad)}, &out, &errb)
	if code != 2 || !strings.Contains(out.String()+errb.String(), "reconcile.consumers[0].mysql.tls") {
		t.Fatalf("exit %d, want 2 naming reconcile.consumers[0].mysql.tls:\n%s%s", code, out.String(), errb.String())
	}
}

// reconcile's usage errors exit 2 before anything is read: a bad --format,
// an empty window, a table the config does not have.
func TestReconcileUsageErrors(t *testing.T) {
	path := writeConfig(t, reconcileConfig)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "xml"}, `--format "xml" is not table or json`},
		{[]string{"--since", "1h", "--until", "2h"}, "--until must be after --since"},
		{[]string{"--table", "shop.orders"}, `"shop.orders" is not a configured outbox table`},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"reconcile", "--config", path}, c.args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

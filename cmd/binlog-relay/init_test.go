package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// init's command line is checked before anything connects: each missing
// or malformed flag is named, a DSN or URL that may hold a password is
// never echoed, and the exit code is 2.
func TestInitUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"init"}, []string{"--source is required", "--primary is required", "--table schema.table is required"}},
		{[]string{"init", "--source", "relay:S3cr3t@tcp(db:3306)/", "--primary", "relay@tcp(db:3306)/", "--table", "orders"},
			[]string{`--table "orders": want schema.table`}},
		{[]string{"init", "--source", "S3cr3t-not-a-dsn", "--primary", "mysql://relay:S3cr3t@", "--table", "a.b"},
			[]string{"--source: not a DSN", "--primary: not a DSN"}},
		{[]string{"init", "--source", "relay@tcp(db:3306)/", "--primary", "relay@tcp(db:3306)/", "--table", "a.b",
			"--broker", "http://guest:S3cr3t@mq/", "--redis", "redis://S3cr3t@r:6379"}, []string{"--broker: want amqp://", "--redis: want host:port"}},
		{[]string{"init", "--config", "relay.yaml"}, []string{"flag provided but not defined: -config"}},
	} {
		code, out, errOut := runIn(t, tc.args...)
		if code != 2 || out != "" {
			t.Errorf("%v: exit %d, stdout %q", tc.args, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr does not say %q:\n%s", tc.args, w, errOut)
			}
		}
		if strings.Contains(errOut, "S3cr3t") {
			t.Errorf("%v: stderr shows a password:\n%s", tc.args, errOut)
		}
	}
	if code, out, _ := runIn(t, "help", "init"); code != 0 || !strings.Contains(out, "-table") || !strings.Contains(out, "-out") {
		t.Errorf("help init: exit %d:\n%s", code, out)
	}
}

// init never overwrites a file (exit 2, before connecting), and a source
// that does not answer is a runtime failure (exit 1) that names it
// without its password.
func TestInitRefusesAnExistingFileAndReportsAServerDown(t *testing.T) {
	existing := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(existing, []byte("name: mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"init", "--source", "relay:S3cr3t@tcp(127.0.0.1:1)/", "--primary", "relay@tcp(127.0.0.1:1)/", "--table", "shop.outbox"}
	code, out, errOut := runIn(t, append(args, "--out", existing)...)
	if code != 2 || out != "" || !strings.Contains(errOut, "exists: init does not overwrite a config") {
		t.Errorf("--out existing: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(existing); string(b) != "name: mine\n" {
		t.Errorf("the existing file changed: %q", b)
	}
	code, out, errOut = runIn(t, args...)
	if code != 1 || out != "" || !strings.Contains(errOut, "127.0.0.1:1") || strings.Contains(errOut, "S3cr3t") {
		t.Errorf("source down: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "the --source DSN holds a password") || !strings.Contains(errOut, "$RELAY_DB_PASSWORD") {
		t.Errorf("no word about the password on the command line:\n%s", errOut)
	}
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// runIn runs the command line in an empty directory (so a relay.yaml in
// the working directory cannot be read by accident).
func runIn(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Chdir(t.TempDir())
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// Help in every spelling prints usage on stdout and exits 0 without
// reading a config (there is none in the directory).
func TestHelpExitsZeroWithoutConfig(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"-help"}, {"help", "run"}, {"help", "lint"},
		{"run", "--help"}, {"run", "-h"}, {"check", "--help"}, {"requeue", "--help"}, {"lint", "-h"}, {"sweep", "--config", "x.yaml", "--help"}} {
		code, out, errOut := runIn(t, args...)
		if code != 0 || !strings.Contains(out, "usage:") || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		if strings.Contains(out+errOut, "relay.yaml:") || strings.Contains(out+errOut, "no such file") {
			t.Errorf("%v read a config: %s%s", args, out, errOut)
		}
	}
	_, out, _ := runIn(t, "help", "requeue")
	if !strings.Contains(out, "-failed") || !strings.Contains(out, "exit codes") {
		t.Errorf("help requeue does not list its flags and exit codes:\n%s", out)
	}
}

// No command or an unknown one is a usage error: usage on stderr, exit 2.
func TestUnknownCommandExitsTwo(t *testing.T) {
	for _, args := range [][]string{{}, {"strat"}, {"help", "strat"}, {"--config", "relay.yaml"}} {
		code, out, errOut := runIn(t, args...)
		if code != 2 || !strings.Contains(errOut, "usage:") || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// lint does not fail on a password or TLS file that exists only where the
// relay is deployed: it says, one line each, which it did not check, by
// key and path (never a path that could be a password), and exits 0;
// check still refuses the config.
func TestLintSaysWhatItDidNotRead(t *testing.T) {
	pki := testenv.NewPKI(t)
	const config = `source: {host: db-replica.invalid, user: relay, password_file: /nonexistent/relay-db}
primary: {host: db-primary.invalid, user: relay, password_file: "S3cr3tXYZ"}
broker: {url: "amqps://relay@mq.invalid:5671/", password_file: /nonexistent/mq, tls: {enabled: true, ca_file: /nonexistent/ca.pem}}
redis: {tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: /nonexistent/redis.key}}
tables:
  - {preset: producer-message, schema: shop}
`
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, config, pki.CAFile, pki.CertFile), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runIn(t, "lint", "--config", path)
	if code != 0 || !strings.Contains(out, "OK:") {
		t.Fatalf("lint exit %d:\n%s%s", code, out, errOut)
	}
	var notChecked []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "not checked") {
			notChecked = append(notChecked, l)
		}
	}
	want := []string{
		"INFO config: source.password_file: not checked: /nonexistent/relay-db does not exist here",
		"INFO config: primary.password_file: not checked: the file it names (not shown",
		"INFO config: broker.password_file: not checked: /nonexistent/mq does not exist here",
		"INFO config: broker.tls.ca_file: not checked: /nonexistent/ca.pem does not exist here",
		"INFO config: redis.tls.key_file: not checked: /nonexistent/redis.key does not exist here",
	}
	if len(notChecked) != len(want) {
		t.Errorf("not checked:\n%s\nwant %d lines", strings.Join(notChecked, "\n"), len(want))
	}
	for i := range min(len(want), len(notChecked)) {
		if !strings.HasPrefix(notChecked[i], want[i]) {
			t.Errorf("line %d: %q, want %q...", i, notChecked[i], want[i])
		}
	}
	if strings.Contains(out, "S3cr3t") || strings.Contains(out, pki.CAFile) {
		t.Errorf("lint showed a path it should not (a password, or a file it read):\n%s", out)
	}
	if code, _, errOut := runIn(t, "check", "--config", path); code != 2 || !strings.Contains(errOut, "source.password_file: reading /nonexistent/relay-db") {
		t.Errorf("check: exit %d, want 2 and the missing file named:\n%s", code, errOut)
	}
}

// An environment variable the config reads is, like a secret file, set
// only where the relay is deployed: lint says it did not check the field
// and exits 0; check still refuses the config, naming the variable.
func TestLintSaysWhichVariablesAreNotSet(t *testing.T) {
	const config = `source: {host: db-replica.invalid, user: relay, password: "${LINT_TEST_DB_PW}"}
primary: {host: db-primary.invalid, user: relay, password: "${LINT_TEST_DB_PW:-fallback}"}
broker: {url: "amqp://relay:${LINT_TEST_MQ_PW}@mq.invalid:5672/"}
tables:
  - {preset: producer-message, schema: shop}
`
	t.Setenv("LINT_TEST_DB_PW", "")
	os.Unsetenv("LINT_TEST_DB_PW")
	t.Setenv("LINT_TEST_MQ_PW", "")
	os.Unsetenv("LINT_TEST_MQ_PW")
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runIn(t, "lint", "--config", path)
	if code != 0 || !strings.Contains(out, "OK:") {
		t.Fatalf("lint exit %d:\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"INFO config: source.password: not checked: environment variable LINT_TEST_DB_PW is not set here",
		"INFO config: broker.url: not checked: environment variable LINT_TEST_MQ_PW is not set here",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lint does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "primary.password") {
		t.Errorf("lint reports a variable with a default as not set:\n%s", out)
	}
	if code, _, errOut := runIn(t, "check", "--config", path); code != 2 || !strings.Contains(errOut, "source.password: unset environment variable LINT_TEST_DB_PW") {
		t.Errorf("check: exit %d, want 2 and the unset variable named:\n%s", code, errOut)
	}
}

// lint accepts every relay config the documentation shows, without a
// server: as written, where the environment variables, password and TLS
// files it names are not there (each said to be not checked), and with
// stand-ins that are, which it checks.
func TestLintAcceptsDocumentedConfigs(t *testing.T) {
	configs := relaytest.DocConfigs(t)
	if len(configs) < 10 {
		t.Fatalf("found only %d config blocks in README.md and docs/*.md", len(configs))
	}
	t.Logf("%d relay configs in README.md and docs/*.md", len(configs))
	lint := func(d relaytest.DocConfig, yaml []byte, env string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "relay.yaml")
		if err := os.WriteFile(path, yaml, 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := run([]string{"lint", "--config", path}, &out, &errb); code != 0 || !strings.Contains(out.String(), "OK:") {
			t.Errorf("%s (%s): lint exit %d\n%s%s\n%s", d.Where, env, code, out.String(), errb.String(), yaml)
		}
	}
	// As written, where the relay is not deployed: none of the variables
	// the configs name is set (each is reported as not checked).
	for _, d := range configs {
		for k := range d.Env {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
		lint(d, d.AsWritten, "no environment")
	}
	for _, d := range configs {
		for k, v := range d.Env {
			t.Setenv(k, v)
		}
		lint(d, d.AsWritten, "as written")
		lint(d, d.YAML, "with stand-in files")
	}
}

// lint accepts the configs shipped with the project (Compose, examples) too.
func TestLintAcceptsShippedConfigs(t *testing.T) {
	files, _ := filepath.Glob(testenv.RepoPath("deploy/docker/*.yaml"))
	more, _ := filepath.Glob(testenv.RepoPath("examples/*/relay.yaml"))
	files = append(files, more...)
	if len(files) < 2 {
		t.Fatalf("shipped configs not found: %v", files)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range relaytest.EnvNameRe.FindAllSubmatch(raw, -1) {
			// As long as a console token must be (http.console_token).
			t.Setenv(string(m[1]), "dummy-value-0123456789")
		}
		var out, errb bytes.Buffer
		if code := run([]string{"lint", "--config", f}, &out, &errb); code != 0 {
			t.Errorf("%s: lint exit %d\n%s%s", f, code, out.String(), errb.String())
		}
	}
}

// lint refuses each broken variant with exit 2, naming the field at fault,
// without contacting a server (the hosts here do not exist). A file that
// is there but bad is an error (one that is not there is not checked:
// TestLintSaysWhatItDidNotRead; nor is an unset variable:
// TestLintSaysWhichVariablesAreNotSet).
func TestLintNamesTheField(t *testing.T) {
	const good = `source: {host: db-replica.invalid, user: relay}
primary: {host: db-primary.invalid, user: relay}
broker: {url: "amqp://relay:x@mq.invalid:5672/"}
tables:
  - {preset: producer-message, schema: shop}
`
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() // a password_file that is a directory
	cases := []struct{ name, yaml, want string }{
		{"unknown key", good + "relay: {batch_sise: 3}\n", "relay.batch_sise: unknown key"},
		{"missing host", strings.Replace(good, "host: db-primary.invalid, ", "", 1), "primary.host: required"},
		{"bad preset", strings.Replace(good, "producer-message", "producer-messages", 1), "tables[0].preset"},
		{"statuses without a value to retry to", good + "  - {schema: shop, name: t2, columns: {id: id, payload: p, status: st}, route: {exchange: ex}, statuses: {sent: S, sending: G, publishable: [G]}}\n", "tables[1].statuses.pending: required"},
		{"sent is publishable", good + "  - {schema: shop, name: t2, columns: {id: id, payload: p, status: st}, route: {exchange: ex}, statuses: {sent: 1, publishable: [1], numeric: true}}\n", "tables[1].statuses.sent"},
		{"two states one value", strings.Replace(good, "schema: shop}", "schema: shop, statuses: {failed: SENT}}", 1), "tables[0].statuses.failed"},
		{"bad template", strings.Replace(good, "schema: shop}", `schema: shop, route: {routing_key: "{tag"}}`, 1), "tables[0].route.routing_key"},
		{"bad log level", good + "log: {level: loud}\n", "log.level"},
		{"a CA file that is not PEM", good + "redis: {tls: {enabled: true, ca_file: " + notPEM + "}}\n", "redis.tls.ca_file"},
		{"a password file that is a directory", strings.Replace(good, "user: relay}", "user: relay, password_file: "+dir+"}", 1), "source.password_file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "relay.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run([]string{"lint", "--config", path}, &out, &errb)
			if code != 2 || !strings.Contains(out.String()+errb.String(), c.want) {
				t.Fatalf("exit %d, want 2 naming %q:\n%s%s", code, c.want, out.String(), errb.String())
			}
		})
	}
}

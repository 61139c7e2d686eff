package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secret stands for a password in a config; leaked finds any 5 characters
// of it, in any case, in a command's output.
const secret = "S3cr3tXYZ"

func leaked(text string) bool {
	low, s := strings.ToLower(text), strings.ToLower(secret)
	for i := 0; i+5 <= len(s); i++ {
		if strings.Contains(low, s[i:i+5]) {
			return true
		}
	}
	return false
}

// runCaptured runs the command line and returns its exit code and all it
// wrote: to its stdout and stderr, and to the process's stderr, where the
// logger writes.
func runCaptured(t *testing.T, args ...string) (code int, output string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	var logged bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&logged, r); close(done) }()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	os.Stderr = old
	_ = w.Close()
	<-done
	_ = r.Close()
	return code, out.String() + errb.String() + logged.String()
}

// Every command that loads a config refuses a broken one with exit 2,
// naming the field or the line, and prints no value of it: the secret in
// each config below reaches no output of lint, check, run or status. (lint
// does not read a password file that is not there: it says so, exit 0.)
func TestConfigErrorsNeverEchoASecret(t *testing.T) {
	const good = `source: {host: 127.0.0.1, port: 1, user: relay}
primary: {host: 127.0.0.1, port: 1, user: relay}
broker: {url: "amqp://relay:x@127.0.0.1:1/"}
tables:
  - {preset: producer-message, schema: shop}
`
	broker := func(section string) string {
		return strings.Replace(good, `{url: "amqp://relay:x@127.0.0.1:1/"}`, section, 1)
	}
	t.Setenv("RELAY_PW_TEST", secret)
	source := func(fields string) string {
		return strings.Replace(good, "port: 1, user: relay}", "port: 1, user: relay, "+fields+"}", 1)
	}
	cases := []struct{ name, yaml, want string }{
		// The case of issue 26: lint, check and run printed
		// "source.password S3cr3tXYZ: unknown key".
		{"a flow mapping missing a colon", source("password SECRET"), `source.<a key with a space in it: a missing ':' after "password"?>: unknown key (line 1, column 49`},
		{"the secret as a key", source("SECRET: x"), "source.<a key that is not lowercase letters, digits and _>: unknown key (line 1"},
		{"a value without its key", source("SECRET"), "source.<an entry without ':': a value without its key?>"},
		{"a bad number", source("server_id: SECRET"), "source.server_id: expected a whole number, 0 or more, got text (line 1"},
		{"a duplicate key", source("password: SECRET, password: x"), "source.password: defined twice (line 1"},
		{"text after a quoted value", source(`password: "SECRET" x`), "parsing config: line 1: did not find expected ',' or '}'"},
		{"an alias", source("password: *SECRET"), "parsing config: line 1: an alias (*name) naming no anchor"},
		{"an alias of the password in a number", source("password: &pw SECRET, server_id: *pw"), "source.server_id: expected a whole number, 0 or more, got text (line 1"},
		{"a merge key", strings.Replace(good, "port: 1, user: relay}", "user: relay, <<: {port: SECRET}}", 1), "source.port: expected a whole number"},
		{"the password in password_file", source("password_file: SECRET"), "source.password_file: reading the file it names"},
		{"a bad duration", good + "checkpoint: {interval: SECRET}\n", "checkpoint.interval: expected a duration"},
		{"a bad log level", good + "log: {level: SECRET}\n", "log.level: not debug, info"},
		// A bad broker.url or urls is the publisher's (Open and lint).
		{"a URL with a bad scheme", broker(`{url: "amqpx://relay:SECRET@mq:5672/"}`), "broker.url: must start with amqp:// or amqps://"},
		{"a bad scheme in urls", broker(`{urls: ["amqp://relay:SECRET@mq-1:5672/", "amqpx://relay:SECRET@mq-2:5672/"]}`), "broker.urls[1]"},
		{"url and urls", broker(`{url: "amqp://relay:SECRET@mq-1:5672/", urls: ["amqp://relay:SECRET@mq-2:5672/"]}`), "broker.urls"},
		{"a repeated URL in urls", broker(`{urls: ["amqp://relay:SECRET@mq-1:5672/", "amqp://relay:SECRET@mq-1:5672/"]}`), "broker.urls[1]"},
		{"a bad scheme, the password from the environment", broker(`{url: "http://relay:${RELAY_PW_TEST}@rabbit:5672/"}`), "broker.url"},
		{"a URL missing its colon", strings.Replace(good, `{url: "amqp://relay:x@127.0.0.1:1/"}`, "{url amqp://relay:SECRET@127.0.0.1:1/}", 1), `broker.<a key with a space in it: a missing ':' after "url"?>`},
	}
	lintSays := map[string]string{ // where lint exits 0 instead
		"the password in password_file": "INFO config: source.password_file: not checked: the file it names (not shown",
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "relay.yaml")
			if err := os.WriteFile(path, []byte(strings.ReplaceAll(c.yaml, "SECRET", secret)), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{"lint", "check", "run", "status"} {
				code, out := runCaptured(t, cmd, "--config", path)
				wantCode, want := 2, c.want
				if says, ok := lintSays[c.name]; ok && cmd == "lint" {
					wantCode, want = 0, says
				}
				if code != wantCode || !strings.Contains(out, want) {
					t.Errorf("%s: exit %d, want %d and %q in:\n%s", cmd, code, wantCode, want, out)
				}
				if leaked(out) {
					t.Errorf("%s printed the secret:\n%s", cmd, out)
				}
			}
		})
	}
}

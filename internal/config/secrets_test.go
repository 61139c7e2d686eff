package config

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// secret stands for a password written somewhere in a config; a test fails
// when any 5 characters of it (any case) reach an error. Five, because the
// YAML library quotes the first 7 characters of a value it cannot decode.
const secret = "S3cr3tXYZ"

// leaked reports whether text holds a piece of secret.
func leaked(text string) bool {
	low := strings.ToLower(text)
	s := strings.ToLower(secret)
	for i := 0; i+5 <= len(s); i++ {
		if strings.Contains(low, s[i:i+5]) {
			return true
		}
	}
	return false
}

var lineRe = regexp.MustCompile(`line \d+`)

// secretSections is a valid config, section by section; a case replaces or
// adds one.
var secretSections = []struct{ key, yaml string }{
	{"name", "name: test-relay\n"},
	{"source", "source: {host: 127.0.0.1, port: 3308, user: relay}\n"},
	{"primary", "primary: {host: 127.0.0.1, port: 3307, user: relay}\n"},
	{"broker", "broker: {url: \"amqp://guest:guest@127.0.0.1:5672/\"}\n"},
	{"tables", "tables:\n  - {preset: producer-message, schema: shop}\n"},
}

// withSection is the config with key's section replaced by (or, when it has
// none, extended with) text, and the line text starts on.
func withSection(key, text string) (yaml string, line int) {
	var b strings.Builder
	done := false
	for _, s := range secretSections {
		if s.key == key {
			line = strings.Count(b.String(), "\n") + 1
			b.WriteString(text)
			done = true
			continue
		}
		b.WriteString(s.yaml)
	}
	if !done {
		line = strings.Count(b.String(), "\n") + 1
		b.WriteString(text)
	}
	return b.String(), line
}

// secretCase is one broken config: section key's text, with SECRET and
// secret standing for the secret (as it is and lowercased). want is the
// field the error must name; atLine, when set, the line of text (1-based)
// it must name.
type secretCase struct {
	name, key, text, want string
	atLine                int
}

// serverSecretCases puts the secret in each place a server section
// (source, primary, redis, a reconcile consumer's mysql) can hold it: body
// is the section around the fields a case adds (%s), path its YAML path.
func serverSecretCases(section, body, path string, port string) []secretCase {
	in := func(fields string) string { return fmt.Sprintf(body, fields) }
	cs := []secretCase{
		{"flow mapping missing a colon", section, in("password SECRET"), path + ".<", 1},
		{"missing colon before a tab", section, in("password\tSECRET"), path + ".<", 1},
		{"missing colon before a quoted value", section, in(`password "SECRET"`), path + ".<", 1},
		{"a value without its key", section, in("SECRET"), path + ".<", 1},
		{"the secret as a key", section, in("SECRET: x"), path + ".<", 1},
		{"a long key", section, in("password_secret_and_then_some_more_words_to_be_long: x"), path + ".<", 1},
		{"a bad number beside the password", section, in("password: SECRET, " + port + ": SECRET"), path + "." + port, 1},
		{"a quoted bad number", section, in(port + `: "SECRET"`), path + "." + port, 1},
		{"a tagged bad number", section, in(port + ": !!int SECRET"), path + "." + port, 1},
		{"a bad boolean", section, in("tls: {enabled: SECRET}"), path + ".tls.enabled", 1},
		{"the password in a list", section, in("password: [SECRET]"), path + ".password", 1},
		{"the password as a mapping", section, in("password: {SECRET: 1}"), path + ".password", 1},
		{"a duplicate password", section, in("password: SECRET, password: SECRET2"), path + ".password", 1},
		{"an alias", section, in("password: *SECRET"), "", 1},
		{"an unclosed quote", section, in(`password: "SECRET`), "", 0},
		{"text after a quoted value", section, in(`password: "SECRET" x`), "", 1},
		{"a backquote", section, in("password: `SECRET`"), "", 1},
		{"a bad escape", section, in(`password: "\qSECRET"`), "", 1},
		{"a stray brace", section, in("password: SECRET}"), "", 1},
		{"an unquoted ${VAR}", section, in("password: SECRET, user: ${RELAY_USER}"), "", 1},
		{"the password in password_file", section, in("password_file: SECRET"), path + ".password_file", 0},
	}
	if port == "port" { // a MySQL section
		cs = append(cs, secretCase{"an unset variable", section, in(`password: SECRET, user: "${PW_TEST_UNSET}"`), path + ".user", 1})
	}
	if section == "source" || section == "primary" { // the others do not read flavor
		cs = append(cs, secretCase{"a bad flavor", section, in("password: SECRET, flavor: SECRET"), path + ".flavor", 0})
	}
	for i := range cs {
		cs[i].name = path + ": " + cs[i].name
	}
	return cs
}

func secretCases() []secretCase {
	mysql := "{host: 127.0.0.1, user: relay, %s}"
	var cs []secretCase
	cs = append(cs, serverSecretCases("source", "source: "+mysql+"\n", "source", "port")...)
	cs = append(cs, serverSecretCases("primary", "primary: "+mysql+"\n", "primary", "port")...)
	cs = append(cs, serverSecretCases("redis", "redis: {addr: \"127.0.0.1:6379\", %s}\n", "redis", "db")...)
	cs = append(cs, serverSecretCases("reconcile",
		"reconcile: {consumers: [{name: c1, schema: shop, mysql: "+mysql+"}]}\n", "reconcile.consumers[0].mysql", "port")...)
	block := "source:\n  host: 127.0.0.1\n  user: relay\n"
	cs = append(cs, []secretCase{
		// Block mappings.
		{"block: a missing colon", "source", block + "  password SECRET\n", "", 4},
		{"block: a missing colon merges lines", "source", block + "  flavor: mariadb password SECRET\n", "source.flavor", 0},
		{"block: a tab for indentation", "source", block + "\tpassword: SECRET\n", "", 0},
		{"block: a value over two lines", "source", block + "  password: SECRET\n   port: 1\n", "", 5},
		{"block: a duplicate password", "source", block + "  password: SECRET\n  password: x\n", "source.password", 5},
		{"block: a bad port", "source", block + "  password: SECRET\n  port: SECRET\n", "source.port", 5},
		{"block: a section given a value", "source", "source: SECRET\n", "source", 1},
		{"block: a section given a list", "source", "source: [SECRET]\n", "source", 1},
		{"block: a bad host in source.hosts", "source", "source: {user: relay, hosts: [db1, \"relay:SECRET@db2\"]}\n", "source.hosts[1]", 0},
		{"top level: the secret as a key", "name", "name: test-relay\nSECRET: 1\n", "<", 2},
		{"top level: a value-like key", "name", "name: test-relay\npassword SECRET: 1\n", "<", 2},
		{"top level: a bad relay name", "name", "name: \"relay SECRET\"\n", "name", 0},
		// The broker (a bad broker.url or urls is the publisher's:
		// cmd/binlog-relay's TestConfigErrorsNeverEchoASecret).
		{"broker: a URL missing its colon", "broker", "broker: {url amqp://relay:SECRET@mq:5672/}\n", "broker.<", 1},
		{"broker: a URL in a list", "broker", "broker: {url: [\"amqp://relay:SECRET@mq:5672/\"]}\n", "broker.url", 1},
		{"broker: a URL with a bad window", "broker", "broker: {url: \"amqp://relay:SECRET@mq:5672/\", window: SECRET}\n", "broker.window", 1},
		{"broker: a reserved dead-letter exchange", "broker", "broker: {url: \"amqp://relay:SECRET@mq:5672/\", dead_letter_exchange: amq.SECRET}\n", "broker.dead_letter_exchange", 0},
		{"broker: the password in password_file", "broker", "broker: {url: \"amqp://relay@mq:5672/\", password_file: SECRET}\n", "broker.password_file", 0},
		// Enums, durations, numbers.
		{"log: a bad level", "log", "log: {level: SECRET}\n", "log.level", 0},
		{"log: a bad format", "log", "log: {format: SECRET}\n", "log.format", 0},
		{"relay: a bad ordering", "relay", "relay: {ordering: SECRET}\n", "relay.ordering", 0},
		{"relay: a bad batch size", "relay", "relay: {batch_size: SECRET}\n", "relay.batch_size", 1},
		{"relay: a bad duration", "relay", "relay: {flush_interval: SECRET}\n", "relay.flush_interval", 1},
		{"checkpoint: a quoted bad duration", "checkpoint", "checkpoint: {interval: \"SECRET\"}\n", "checkpoint.interval", 1},
		{"http: a bad management URL", "http", "http: {management_url: \"ftp://monitor:SECRET@rabbit:15672\"}\n", "http.management_url", 0},
		{"http: a bad addr", "http", "http: {addr: \"SECRET and more\"}\n", "http.addr", 0},
		{"http: a bad duration", "http", "http: {ready_max_lag: SECRET}\n", "http.ready_max_lag", 1},
		// Tables.
		{"tables: an unknown preset", "tables", "tables:\n  - {preset: SECRET, schema: shop}\n", "tables[0].preset", 0},
		{"tables: a missing colon", "tables", "tables:\n  - {preset: producer-message, schema: shop, password SECRET}\n", "tables[0].<", 2},
		{"tables: the secret as a key", "tables", "tables:\n  - {preset: producer-message, schema: shop, SECRET: x}\n", "tables[0].<", 2},
		{"tables: a bad number", "tables", "tables:\n  - {preset: producer-message, schema: shop, max_retries: SECRET}\n", "tables[0].max_retries", 2},
		{"tables: a duplicate map key", "tables", "tables:\n  - {preset: debezium, schema: shop, route: {exchange_map_column: kind, exchange_map: {SECRET: a, SECRET: b}}}\n", "tables[0].route.exchange_map", 2},
		{"tables: a value with a space in an identifier", "tables", "tables:\n  - {preset: producer-message, schema: shop, columns: {status: \"SECRET x\"}}\n", "tables[0].columns.status", 0},
		{"tables: an unset variable under an unchecked key", "tables", "tables:\n  - {preset: producer-message, schema: shop, password SECRET: \"${PW_TEST_UNSET}\"}\n", "tables[0].<", 0},
		// Reconcile consumers.
		{"reconcile: a bad DSN", "reconcile", "reconcile: {consumers: [{name: c1, schema: shop, dsn: \"relay:SECRET@tcp(db\"}]}\n", "reconcile.consumers[0].dsn", 0},
		{"reconcile: a bad consumer name", "reconcile", "reconcile: {consumers: [{name: \"c1 SECRET\", schema: shop, mysql: {host: h, user: u}}]}\n", "reconcile.consumers[0].name", 0},
		{"reconcile: an unknown table", "reconcile", "reconcile: {consumers: [{name: c1, schema: shop, mysql: {host: h, user: u}, tables: [SECRET]}]}\n", "reconcile.consumers[0].tables[0]", 0},
		{"reconcile: an unknown inbox preset", "reconcile", "reconcile: {consumers: [{name: c1, schema: shop, mysql: {host: h, user: u}, preset: SECRET}]}\n", "reconcile.consumers[0]", 0},
		{"reconcile: a bad exchange", "reconcile", "reconcile: {consumers: [{name: c1, schema: shop, mysql: {host: h, user: u}, exchanges: [SECRET" + strings.Repeat("x", 250) + "]}]}\n", "reconcile.consumers[0].exchanges[0]", 0},
	}...)
	return cs
}

// No config error echoes a value that could be a secret: each case puts
// one in another place a mistake can leave it, and the error still names
// the field or the line.
func TestConfigErrorsNeverEchoASecret(t *testing.T) {
	cases := secretCases()
	if len(cases) < 100 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := strings.NewReplacer("SECRET", secret, "secret", strings.ToLower(secret)).Replace(c.text)
			raw, line := withSection(c.key, text)
			_, err := Parse([]byte(raw), func(string) (string, bool) { return "", false })
			if err == nil {
				t.Fatalf("no error for\n%s", raw)
			}
			msg := err.Error()
			t.Log(msg)
			if leaked(msg) {
				t.Errorf("the error shows the secret:\n%s\nconfig:\n%s", msg, raw)
			}
			if c.want != "" && !strings.Contains(msg, c.want) {
				t.Errorf("the error does not name %s:\n%s\nconfig:\n%s", c.want, msg, raw)
			}
			if c.want == "" && c.atLine == 0 && !lineRe.MatchString(msg) {
				t.Errorf("the error names neither a field nor a line:\n%s\nconfig:\n%s", msg, raw)
			}
			if c.atLine > 0 {
				if at := fmt.Sprintf("line %d", line+c.atLine-1); !strings.Contains(msg, at) {
					t.Errorf("the error does not name %s:\n%s\nconfig:\n%s", at, msg, raw)
				}
			}
		})
	}
}

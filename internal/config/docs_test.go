package config_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// Every relay config the documentation shows validates, with the
// environment variables it refers to set to dummy values and its password
// files standing in.
func TestDocumentedConfigsValidate(t *testing.T) {
	configs := relaytest.DocConfigs(t)
	if len(configs) < 10 {
		t.Fatalf("found only %d config blocks in README.md and docs/*.md", len(configs))
	}
	for _, d := range configs {
		if _, err := config.Parse(d.YAML, d.Lookup); err != nil {
			t.Errorf("%s: %v\n%s", d.Where, err, d.YAML)
		}
	}
}

// Secrets come through whole whatever they hold: YAML is parsed before
// ${VAR} is expanded, so a value cannot change the document.
func TestSecretsRoundTrip(t *testing.T) {
	secrets := []string{
		"pa ss #not-a-comment", "p#w", `it's "quoted"`, "{braces}", "[list]", "key: value",
		"a: b # c", "dollar$", "$${NOT_EXPANDED}", "${ALSO_NOT}", "null", "~", "123", "true",
		"multi\nline", "  padded  ", "-", "*alias", "&anchor", "!tag", "%percent", "@at", "`tick`",
	}
	for _, s := range secrets {
		env := map[string]string{"SECRET": s, "DB_NAME": "shop"}
		raw := `source: {host: 10.0.0.12, user: relay, password: "${SECRET}"}
primary:
  host: 10.0.0.11
  user: relay
  password: ${SECRET}        # plain: the comment is not part of it
broker: {url: "amqp://relay:x@10.0.0.20:5672/"}
redis:
  password: '${SECRET}'
tables:
  - {preset: producer-message, schema: "${DB_NAME}"}
`
		c, err := config.Parse([]byte(raw), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Fatalf("secret %q: %v", s, err)
		}
		for field, got := range map[string]string{"source.password": c.Source.Password,
			"primary.password": c.Primary.Password, "redis.password": c.Redis.Password} {
			if got != s {
				t.Errorf("secret %q arrived in %s as %q", s, field, got)
			}
		}
	}
}

// $$ is an escaped $: "$$" is "$" and "$${X}" is the text "${X}"; a lone $
// stays; comments and keys are never expanded; an unset variable is named
// with the field that refers to it.
func TestExpansionRules(t *testing.T) {
	env := map[string]string{"PW": "s3cret", "PORT": "3310"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	raw := `# ${IN_A_COMMENT} is not expanded
source:
  host: 10.0.0.12
  port: ${PORT:-3306}
  user: relay
  password: a$$b$${PW}$c${PW}
primary: {host: 10.0.0.11, user: "${USER_UNSET:-relay}"}   # ${NOR_HERE}
broker: {url: "amqp://relay:${PW}@10.0.0.20:5672/"}
tables:
  - {preset: producer-message, schema: shop, columns: {version: ver$1}}
`
	c, err := config.Parse([]byte(raw), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.Port != 3310 || c.Source.Password != "a$b${PW}$cs3cret" || c.Primary.User != "relay" ||
		c.Broker.URL != "amqp://relay:s3cret@10.0.0.20:5672/" || c.Tables[0].Columns.Version != "ver$1" {
		t.Fatalf("port %d password %q user %q url %q version %q", c.Source.Port, c.Source.Password, c.Primary.User,
			c.Broker.URL, c.Tables[0].Columns.Version)
	}
	_, err = config.Parse([]byte(strings.Replace(raw, "${PW}@", "${RABBIT_PASSWORD}@", 1)), lookup)
	if err == nil || !strings.Contains(err.Error(), "broker.url: unset environment variable RABBIT_PASSWORD") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("unset variable: %v", err)
	}
	// A key is never expanded: ${X} as a key is an unknown key.
	_, err = config.Parse([]byte(raw+"${PW}: 1\n"), lookup)
	if err == nil || !strings.Contains(err.Error(), "${PW}: unknown key") {
		t.Fatalf("a key was expanded: %v", err)
	}
	// An unquoted ${VAR} in a flow mapping is YAML syntax, and the error says so.
	_, err = config.Parse([]byte(strings.Replace(raw, `"${USER_UNSET:-relay}"`, `${USER_UNSET:-relay}`, 1)), lookup)
	if err == nil || !strings.Contains(err.Error(), `quote a ${VAR} value`) {
		t.Fatalf("flow mapping: %v", err)
	}
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal("unexpected")
	}
}

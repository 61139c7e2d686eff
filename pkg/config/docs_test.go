package config

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var (
	yamlBlockRe = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")
	envNameRe   = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)
)

// docBase completes a documentation snippet that shows only some sections
// (tables:, sweeper:, http:): the snippet's sections replace these.
const docBase = `source: {host: 10.0.0.12, user: relay}
primary: {host: 10.0.0.11, user: relay}
broker: {url: "amqp://relay:secret@10.0.0.20:5672/"}
tables:
  - {preset: producer-message, schema: orders}
`

// docConfigs returns every YAML block of README.md and docs/*.md that is
// (part of) a relay config, keyed by file:line, completed over docBase.
// Blocks with no relay key at all (Prometheus, Compose) are not configs.
func docConfigs(t *testing.T) map[string][]byte {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	known := map[string]bool{}
	for _, f := range yamlKeys(Config{}) {
		known[f] = true
	}
	out := map[string][]byte{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range yamlBlockRe.FindAllSubmatchIndex(raw, -1) {
			block := raw[m[2]:m[3]]
			where := filepath.Base(f) + ":" + strconv.Itoa(1+strings.Count(string(raw[:m[0]]), "\n"))
			var top yaml.Node
			if err := yaml.Unmarshal(block, &top); err != nil {
				t.Errorf("%s: the YAML does not parse: %v", where, err)
				continue
			}
			if len(top.Content) == 0 || top.Content[0].Kind != yaml.MappingNode {
				continue
			}
			doc := top.Content[0]
			relay := false
			for i := 0; i < len(doc.Content); i += 2 {
				relay = relay || known[doc.Content[i].Value]
			}
			if !relay {
				continue
			}
			var base yaml.Node
			_ = yaml.Unmarshal([]byte(docBase), &base)
			mergeMapping(base.Content[0], doc)
			b, err := yaml.Marshal(&base)
			if err != nil {
				t.Fatal(err)
			}
			out[where] = b
		}
	}
	return out
}

func yamlKeys(v any) []string {
	var keys []string
	var n yaml.Node
	_ = n.Encode(v)
	for i := 0; i < len(n.Content); i += 2 {
		keys = append(keys, n.Content[i].Value)
	}
	return append(keys, "tables")
}

// mergeMapping lays src over dst: mappings merge key by key (a snippet's
// source: {tls: ...} keeps the base's host), anything else replaces.
func mergeMapping(dst, src *yaml.Node) {
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		found := false
		for j := 0; j+1 < len(dst.Content); j += 2 {
			if dst.Content[j].Value != k.Value {
				continue
			}
			found = true
			if v.Kind == yaml.MappingNode && dst.Content[j+1].Kind == yaml.MappingNode {
				mergeMapping(dst.Content[j+1], v)
			} else {
				dst.Content[j+1] = v
			}
		}
		if !found {
			dst.Content = append(dst.Content, k, v)
		}
	}
}

// Every relay config the documentation shows validates, with the
// environment variables it refers to set to dummy values and its password
// files standing in.
func TestDocumentedConfigsValidate(t *testing.T) {
	readFile = func(string) ([]byte, error) { return []byte("dummy-secret\n"), nil }
	t.Cleanup(func() { readFile = os.ReadFile })
	configs := docConfigs(t)
	if len(configs) < 10 {
		t.Fatalf("found only %d config blocks in README.md and docs/*.md", len(configs))
	}
	for where, raw := range configs {
		env := map[string]string{}
		for _, m := range envNameRe.FindAllSubmatch(raw, -1) {
			env[string(m[1])] = "dummy"
		}
		if _, err := Parse(raw, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
			t.Errorf("%s: %v\n%s", where, err, raw)
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
		c, err := Parse([]byte(raw), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
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
	c, err := Parse([]byte(raw), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.Port != 3310 || c.Source.Password != "a$b${PW}$cs3cret" || c.Primary.User != "relay" ||
		c.Broker.URL != "amqp://relay:s3cret@10.0.0.20:5672/" || c.Tables[0].Columns.Version != "ver$1" {
		t.Fatalf("port %d password %q user %q url %q version %q", c.Source.Port, c.Source.Password, c.Primary.User,
			c.Broker.URL, c.Tables[0].Columns.Version)
	}
	_, err = Parse([]byte(strings.Replace(raw, "${PW}@", "${RABBIT_PASSWORD}@", 1)), lookup)
	if err == nil || !strings.Contains(err.Error(), "broker.url: unset environment variable RABBIT_PASSWORD") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("unset variable: %v", err)
	}
	// A key is never expanded: ${X} as a key is an unknown key.
	_, err = Parse([]byte(raw+"${PW}: 1\n"), lookup)
	if err == nil || !strings.Contains(err.Error(), "${PW}: unknown key") {
		t.Fatalf("a key was expanded: %v", err)
	}
	// An unquoted ${VAR} in a flow mapping is YAML syntax, and the error says so.
	_, err = Parse([]byte(strings.Replace(raw, `"${USER_UNSET:-relay}"`, `${USER_UNSET:-relay}`, 1)), lookup)
	if err == nil || !strings.Contains(err.Error(), `quote a ${VAR} value`) {
		t.Fatalf("flow mapping: %v", err)
	}
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal("unexpected")
	}
}

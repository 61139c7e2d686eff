package relaytest

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

var (
	yamlBlockRe = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")
	// EnvNameRe finds the ${NAME} references of a config.
	EnvNameRe = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)
)

// docBase completes a documentation snippet that shows only some sections
// (tables:, sweeper:, http:): the snippet's sections replace these.
const docBase = `source: {host: 10.0.0.12, user: relay}
primary: {host: 10.0.0.11, user: relay}
broker: {url: "amqp://relay:secret@10.0.0.20:5672/"}
tables:
  - {preset: producer-message, schema: orders}
`

// DocConfig is one relay config shown in the documentation, ready to load:
// its password and TLS files point at stand-ins that exist, and Env sets
// every ${VAR} it refers to.
type DocConfig struct {
	Where string // file:line
	YAML  []byte
	// AsWritten is YAML with the files the documentation names, which
	// exist only where the relay is deployed.
	AsWritten []byte
	Env       map[string]string
}

// Lookup is an environment lookup over Env.
func (d DocConfig) Lookup(k string) (string, bool) { v, ok := d.Env[k]; return v, ok }

// DocConfigs returns every YAML block of README.md and docs/*.md that is
// (part of) a relay config, completed over docBase. Blocks with no relay
// key at all (Prometheus, Compose) are not configs.
func DocConfigs(t testing.TB) []DocConfig {
	t.Helper()
	var out []DocConfig
	files := standInFiles(t)
	for where, raw := range docBlocks(t) {
		d := DocConfig{Where: where, AsWritten: raw, Env: map[string]string{}}
		for _, m := range EnvNameRe.FindAllSubmatch(raw, -1) {
			d.Env[string(m[1])] = "dummy"
		}
		d.YAML = fileKeyRe.ReplaceAllFunc(raw, func(m []byte) []byte {
			sub := fileKeyRe.FindSubmatch(m)
			return []byte(string(sub[1]) + ": " + files[string(sub[1])])
		})
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Where < out[j].Where })
	return out
}

var fileKeyRe = regexp.MustCompile(`\b(password_file|console_token_file|ca_file|cert_file|key_file): *([^\s,}#]+)`)

// standInFiles writes a password file, a console token file and a CA with a client certificate,
// keyed by the config field that names each.
func standInFiles(t testing.TB) map[string]string {
	t.Helper()
	pki := testenv.NewPKI(t)
	password := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(password, []byte("dummy-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(t.TempDir(), "console-token")
	if err := os.WriteFile(token, []byte("dummy-console-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"password_file": password, "console_token_file": token, "ca_file": pki.CAFile,
		"cert_file": pki.CertFile, "key_file": pki.KeyFile}
}

func docBlocks(t testing.TB) map[string][]byte {
	t.Helper()
	files, _ := filepath.Glob(testenv.RepoPath("docs/*.md"))
	files = append(files, testenv.RepoPath("README.md"))
	known := map[string]bool{}
	for _, f := range yamlKeys(config.Config{}) {
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

// replacedBy are keys of docBase a snippet's key stands in for: the two
// are exclusive (source.hosts or source.host, broker.urls or broker.url).
var replacedBy = map[string]string{"hosts": "host", "urls": "url"}

// mergeMapping lays src over dst: mappings merge key by key (a snippet's
// source: {tls: ...} keeps the base's host), anything else replaces, and a
// key of src drops the base's key it is exclusive with (replacedBy).
func mergeMapping(dst, src *yaml.Node) {
	for i := 0; i+1 < len(src.Content); i += 2 {
		if old, ok := replacedBy[src.Content[i].Value]; ok && !hasKey(src, old) {
			deleteKey(dst, old)
		}
	}
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

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}

func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

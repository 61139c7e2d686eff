package relaytest

import (
	"fmt"
	"sort"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Config is a relay config for the test stack: the relay reads the stack's
// replica, marks rows on its primary, publishes to its broker and
// checkpoints in its Redis, with test-sized intervals. Each top-level
// section is written on one line as "key: {flow body}", so a test may
// rewrite one (point source at a proxy) with a plain string replace.
type Config struct {
	Name   string
	Tables string // the entries under "tables:", each "  - {...}\n"
	// Sections replaces or adds top-level sections by key, each a flow-style
	// body ("{enabled: false}"); an empty body drops a default section.
	Sections map[string]string
	// RelayFields are added to the relay section ("lanes: 4").
	RelayFields string
	// Strict adds "ordering: strict" to the relay section.
	Strict bool
	// Extra is appended verbatim after the tables, at top level.
	Extra string
}

// stackSections are the sections every config starts from.
func stackSections() map[string]string {
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	ph, pp := testenv.HostPort(testenv.PrimaryDSN)
	return map[string]string{
		"source":     fmt.Sprintf("{host: %s, port: %d, user: root}", sh, sp),
		"primary":    fmt.Sprintf("{host: %s, port: %d, user: root}", ph, pp),
		"broker":     fmt.Sprintf("{url: %q}", testenv.AMQPURL),
		"redis":      fmt.Sprintf("{addr: %q}", testenv.RedisAddr),
		"checkpoint": "{interval: 200ms}",
		"relay":      "{flush_interval: 50ms}",
		"log":        "{level: info, format: json}",
	}
}

// YAML renders the config: name first, then the sections by key, then the
// tables and Extra.
func (c Config) YAML() string {
	s := stackSections()
	for k, v := range c.Sections {
		s[k] = v
	}
	fields := c.RelayFields
	if c.Strict {
		fields = strings.TrimPrefix(fields+", ordering: strict", ", ")
	}
	if fields != "" {
		s["relay"] = strings.TrimSuffix(s["relay"], "}") + ", " + fields + "}"
	}
	keys := make([]string, 0, len(s))
	for k, v := range s {
		if v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\n", c.Name)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, s[k])
	}
	b.WriteString("tables:\n" + c.Tables)
	if c.Extra != "" {
		if !strings.HasSuffix(c.Tables, "\n") {
			b.WriteString("\n")
		}
		b.WriteString(c.Extra)
	}
	return b.String()
}

// RelayConfig is Config{Name: name, Tables: tablesYAML, Extra: extra}.YAML(),
// the form most tests need.
func RelayConfig(name, tablesYAML, extra string) string {
	return Config{Name: name, Tables: tablesYAML, Extra: extra}.YAML()
}

// SeedTable is the tables YAML for the seed producer_message table.
func SeedTable(db string) string {
	return fmt.Sprintf("  - {preset: producer-message, schema: %s}\n", db)
}

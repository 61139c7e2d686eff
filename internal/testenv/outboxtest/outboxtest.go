// Package outboxtest makes the outbox tables that unit tests route, decode,
// sweep and count: a preset's table in the test's schema, edited, then
// validated as the relay's config validates it. It imports only
// pkg/outbox, so the tests of the packages that take tables (router,
// binlog, sweeper, metrics) can use it without an import cycle.
package outboxtest

import (
	"testing"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Preset is the preset called name in schema, changed by edit (when not
// nil) and validated; the test fails at once when any of that fails.
func Preset(t testing.TB, name, schema string, edit func(*outbox.Table)) *outbox.Table {
	t.Helper()
	tb, err := outbox.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	tb.Schema = schema
	if edit != nil {
		edit(&tb)
	}
	if err := tb.Validate("tables[0]"); err != nil {
		t.Fatalf("invalid test table: %v", err)
	}
	return &tb
}

package config_test

import (
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/config"
)

// The loader declares a table's eventuate.envelope (pkg/outbox's
// Table.Eventuate): the eventuate preset's true stands unless the table
// turns it off, any table may turn it on, and a misspelt key is refused.
func TestEventuateEnvelopeKey(t *testing.T) {
	const head = `name: test-relay
source: {host: 127.0.0.1, port: 3308, user: relay}
primary: {host: 127.0.0.1, port: 3307, user: relay}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}
tables:
`
	none := func(string) (string, bool) { return "", false }
	for _, c := range []struct {
		table string
		want  bool
	}{
		{"  - {preset: eventuate, schema: shop}\n", true},
		{"  - {preset: eventuate, schema: shop, eventuate: {}}\n", true},
		{"  - {preset: eventuate, schema: shop, eventuate: {envelope: false}}\n", false},
		{"  - {preset: debezium, schema: shop}\n", false},
		{"  - {preset: debezium, schema: shop, eventuate: {envelope: true}}\n", true},
	} {
		cfg, err := config.Parse([]byte(head+c.table), none)
		if err != nil {
			t.Fatalf("%s: %v", c.table, err)
		}
		if got := cfg.Tables[0].Eventuate.Envelope; got != c.want {
			t.Errorf("%s: envelope %v, want %v", strings.TrimSpace(c.table), got, c.want)
		}
	}
	_, err := config.Parse([]byte(head+"  - {preset: eventuate, schema: shop, eventuate: {envelop: false}}\n"), none)
	if err == nil || !strings.Contains(err.Error(), "tables[0].eventuate.envelop: unknown key") {
		t.Fatalf("misspelt key: %v", err)
	}
}

package app

import (
	"fmt"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The saved seq_scope covers every input that decides which rows the
// reader emits, so a checkpoint's publishing ids are not resumed after one
// of them changed: the rows after it would take ids at or below what the
// stream stored, and the broker would drop them as duplicates (issue 37,
// item 2). Each changed setting gives another scope.
func TestSeqScopeCoversTheNumbering(t *testing.T) {
	scope := func(table string) string {
		t.Helper()
		cfg, err := config.Parse([]byte("name: scope-test\ntables: ["+table+"]\n"+
			"source: {host: 127.0.0.1, port: 3308, user: relay}\nprimary: {host: 127.0.0.1, port: 3307, user: relay}\n"+
			`broker: {url: "amqp://guest:guest@127.0.0.1:5672/", stream: {name: events}}`+"\n"),
			func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		if !cfg.Broker.Stream.Enabled() {
			t.Fatal("the stream is not enabled")
		}
		w := &wiring{cfg: cfg}
		return w.seqScope()
	}
	base := scope("{preset: producer-message, schema: shop}")
	for name, table := range map[string]string{
		"publishable": "{preset: producer-message, schema: shop, statuses: {publishable: [PENDING]}}",
		"time_zone":   "{preset: producer-message, schema: shop, route: {time_zone: Europe/Paris}}",
	} {
		t.Run(name, func(t *testing.T) {
			if got := scope(table); got == base {
				t.Errorf("%s changed, the scope did not (%s): ids would be resumed under another numbering", name, got)
			}
		})
	}
	if again := scope("{preset: producer-message, schema: shop}"); again != base {
		t.Errorf("the same config gave scopes %s and %s", base, again)
	}
}

// The reader's numbering inputs that no config key sets (its transaction
// buffer limits) and the emit rules' version are in it too.
func TestNumberingCoversTheReader(t *testing.T) {
	p, err := outbox.Preset("producer-message")
	if err != nil {
		t.Fatal(err)
	}
	p.Schema = "shop"
	tables := []*outbox.Table{&p}
	base := binlog.Numbering(binlog.Config{}, tables)
	if got := binlog.Numbering(binlog.Config{TxBufferRows: 10}, tables); got == base {
		t.Error("the transaction buffer rows changed, the numbering did not")
	}
	if got := binlog.Numbering(binlog.Config{TxBufferBytes: 1 << 10}, tables); got == base {
		t.Error("the transaction buffer bytes changed, the numbering did not")
	}
	if !strings.HasPrefix(base, fmt.Sprintf("emit=%d ", binlog.EmitVersion)) {
		t.Errorf("numbering %q does not name the emit rules' version", base)
	}
}

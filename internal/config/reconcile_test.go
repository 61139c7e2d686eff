package config

import (
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

const reconcileTables = "tables:\n  - {preset: producer-message, schema: shop}\n  - {preset: local-message, schema: shop}\n"

// The reconcile section's defaults, and a consumer given as a host block,
// as a DSN (its database is the schema) or with a dedup preset and a log.
func TestReconcileConfig(t *testing.T) {
	c := mustParse(t, base+reconcileTables+`reconcile:
  consumers:
    - name: inventory
      mysql: {host: 10.0.0.40, user: reader, password: pw}
      schema: inventory
    - name: billing
      dsn: "reader:pw@tcp(10.0.0.41:3306)/billing"
      preset: consumer-message
      tables: [shop.producer_message]
      routing_keys: ["order.*"]
    - name: audit
      mysql: {host: 10.0.0.42, user: reader}
      schema: audit
      preset: msg-dedup
      log_table: t_message_log
      columns: {message_id: msg_id}
`)
	r := c.Reconcile
	if r.Interval != 0 || r.Window != 24*time.Hour || r.GracePeriod != 5*time.Minute || r.PendingAfter != 15*time.Minute ||
		r.ChunkSize != 5000 || r.MaxIDs != 100 || r.Key != "binlog-relay:test-relay:reconcile" || r.Repair {
		t.Fatalf("defaults: %+v", r)
	}
	inv, bill, audit := r.Consumers[0], r.Consumers[1], r.Consumers[2]
	if inv.MySQL.Port != 3306 || inv.Consumer != "inventory" || bill.Schema != "billing" || bill.Redacted() != "reader@10.0.0.41:3306" {
		t.Fatalf("consumers: %+v / %+v", inv, bill)
	}
	dc, err := bill.ConsumerDriverConfig("reconcile.consumers[1]")
	dsn := dc.FormatDSN()
	if err != nil || !strings.Contains(dsn, "parseTime=true") || !strings.Contains(dsn, "interpolateParams=true") {
		t.Fatalf("dsn %q: %v", dsn, err)
	}
	l, err := audit.InboxLayout()
	if err != nil || l.Table != "t_msg_dedup" || l.LogTable != "t_message_log" || l.Columns.MessageID != "msg_id" {
		t.Fatalf("layout %+v: %v", l, err)
	}
}

// Every bad reconcile field is named, and a DSN's password never shows in
// an error.
func TestReconcileErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"reconcile: {window: -1h}", "reconcile.window: must be positive"},
		{"reconcile: {chunk_size: 10}", "reconcile.chunk_size: 10 is not between 100 and 100000"},
		{"reconcile: {interval: -1m}", "reconcile.interval: must not be negative"},
		{"reconcile: {consumers: [{name: a, schema: s}]}", "reconcile.consumers[0].mysql.host: required (or dsn)"},
		{"reconcile: {consumers: [{name: \"a b\", schema: s, mysql: {host: h, user: u}}]}", "reconcile.consumers[0].name"},
		{"reconcile: {consumers: [{name: a, mysql: {host: h, user: u}}]}", "reconcile.consumers[0].schema: required"},
		{"reconcile: {consumers: [{name: a, schema: s, mysql: {host: h}}]}", "reconcile.consumers[0].mysql.user: required"},
		{"reconcile: {consumers: [{name: a, schema: s, mysql: {host: h, user: u}, preset: inbx}]}", "reconcile.consumers[0]: inbox config: Preset: unknown preset \"inbx\""},
		{"reconcile: {consumers: [{name: a, schema: s, mysql: {host: h, user: u}, tables: [orders]}]}", "reconcile.consumers[0].tables[0]: not one configured outbox table"},
		{"reconcile: {consumers: [{name: a, schema: s, mysql: {host: h, user: u}}, {name: a, schema: s, mysql: {host: h, user: u}}]}", "reconcile.consumers[1].name: the same as reconcile.consumers[0].name"},
		{"reconcile: {consumers: [{name: a, schema: s, mysql: {host: h, user: u}, columns: {msg: x}}]}", "reconcile.consumers[0].columns.msg: unknown key"},
		{"reconcile: {consumers: [{name: a, schema: s, dsn: \"u:s3cret@tcp(h:1\", mysql: {host: h, user: u}}]}", "reconcile.consumers[0].dsn: set mysql or dsn, not both"},
		{"reconcile: {consumers: [{name: a, schema: s, dsn: \"u:s3cret@bad\"}]}", "reconcile.consumers[0].dsn: not a DSN"},
	} {
		_, err := parse(t, base+reconcileTables+c.yaml+"\n", nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.yaml, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the password is in the error: %v", c.yaml, err)
		}
	}
}

// TestMatchTablesThroughAPattern: a name no entry lists but a pattern
// entry matches is that entry's table under the name (requeue, replay and
// reconcile --table tenant_7.outbox).
func TestMatchTablesThroughAPattern(t *testing.T) {
	p, err := outbox.Preset("producer-message")
	if err != nil {
		t.Fatal(err)
	}
	p.Schema, p.Name = "tenant_*", "outbox"
	found := MatchTables([]*outbox.Table{&p}, "tenant_7.outbox")
	if len(found) != 1 || found[0].FullName() != "tenant_7.outbox" || found[0].Entry != &p {
		t.Fatalf("found %v, want tenant_7.outbox of the pattern entry", found)
	}
	if found := MatchTables([]*outbox.Table{&p}, "other.outbox"); len(found) != 0 {
		t.Errorf("other.outbox matched %v", found)
	}
}

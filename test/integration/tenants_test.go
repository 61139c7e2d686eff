package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// TestTenantsMatchedByOnePattern: 200 tenant schemas, one tables: entry
// (schema: <prefix>_*). While rows stream into them, 20 tenants are
// created (rows inserted right after the CREATE, in the same second), 5
// dropped, and one table renamed in from a schema the pattern does not
// match. Every row of every live tenant arrives once, with its schema in
// x-relay-schema, and ends SENT (the rows written into the renamed table
// before the rename by the sweeper, the others by the binlog path);
// nothing of a dropped tenant arrives that was written after its DROP.
func TestTenantsMatchedByOnePattern(t *testing.T) {
	testenv.Integration(t)
	base := testenv.NewDB(t, "schema/producer_message.sql") // the model table, outside the pattern
	prefix := strings.ReplaceAll(testenv.UniqueName("tn"), "_", "")
	schema := func(i int) string { return fmt.Sprintf("%s_%03d", prefix, i) }
	root := base.Primary
	var created []string
	t.Cleanup(func() {
		for _, s := range append(created, prefix+"stage") {
			_, _ = root.Exec("DROP DATABASE IF EXISTS " + s)
		}
	})
	create := func(s string) string {
		created = append(created, s)
		return fmt.Sprintf("CREATE DATABASE %s; CREATE TABLE %s.producer_message LIKE %s.producer_message;", s, s, base.Name)
	}
	const initial, added, dropped = 200, 20, 5
	var ddl strings.Builder
	for i := range initial {
		ddl.WriteString(create(schema(i)))
		if i%50 == 49 {
			base.Exec(t, ddl.String())
			ddl.Reset()
		}
	}
	// The table renamed in later, in a schema the pattern does not match.
	base.Exec(t, fmt.Sprintf("CREATE DATABASE %[1]sstage; CREATE TABLE %[1]sstage.producer_message LIKE %[2]s.producer_message", prefix, base.Name))
	base.WaitReplicated(t, 60*time.Second)

	br, got := testenv.NewCollectedBroker(t)
	tables := fmt.Sprintf("  - {preset: producer-message, schema: \"%s_*\", name: producer_message}\n", prefix)
	began := time.Now()
	r := relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("tenants"), tables,
		"sweeper: {interval: 1s, grace_period: 10s}\n"))
	t.Logf("relay started over %d tenants in %s", initial, time.Since(began).Round(time.Millisecond))

	var mu sync.Mutex
	want := map[string]string{} // message id -> schema, of the live tenants
	insert := func(s string, n int) {
		t.Helper()
		var b strings.Builder
		for k := range n {
			id := fmt.Sprintf("%s-%d-%d", s, time.Now().UnixNano(), k)
			fmt.Fprintf(&b, "INSERT INTO %s.producer_message (message_id, exchange, routing_key, content) VALUES ('%s', '%s', 'tenant.event', '{}');", s, id, br.Exchange)
			mu.Lock()
			want[id] = s
			mu.Unlock()
		}
		base.Exec(t, b.String())
	}
	forget := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		for id, sc := range want {
			if sc == s {
				delete(want, id)
			}
		}
	}

	// Rows into every tenant, then the changes with rows in between.
	for i := range initial {
		insert(schema(i), 2)
	}
	// Rows written into the stage table before its rename: PENDING where
	// the relay does not read; the sweeper sends them once it is matched.
	stage := prefix + "stage"
	insert(stage, 3)
	renamed := schema(initial + added)
	var droppedBefore []string // the message ids of dropped tenants, before their DROP
	for i := range added {
		s := schema(initial + i)
		// CREATE and the first rows back to back: the same second.
		base.Exec(t, create(s))
		insert(s, 3)
		insert(schema(i), 1) // an old tenant writes meanwhile
		if i < dropped {
			d := schema(initial - 1 - i)
			insert(d, 1)
			mu.Lock()
			for id, sc := range want {
				if sc == d {
					droppedBefore = append(droppedBefore, id)
				}
			}
			mu.Unlock()
			forget(d)
			base.Exec(t, "DROP DATABASE "+d)
		}
		if i == added/2 {
			base.Exec(t, fmt.Sprintf("CREATE DATABASE %[1]s; RENAME TABLE %[2]s.producer_message TO %[1]s.producer_message", renamed, stage))
			created = append(created, renamed)
			mu.Lock()
			for id, sc := range want {
				if sc == stage {
					want[id] = renamed
				}
			}
			mu.Unlock()
			insert(renamed, 2)
		}
	}
	for i := range added {
		insert(schema(initial+i), 2)
	}

	// Every row of a live tenant arrives once, its schema in the header.
	mu.Lock()
	wantCount := len(want)
	mu.Unlock()
	testenv.WaitFor(t, 90*time.Second, "every live tenant's rows", func() (bool, string) {
		seen := map[string]bool{}
		for _, d := range got.All() {
			seen[d.MessageID] = true
		}
		missing := 0
		for id := range want {
			if !seen[id] {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d missing", missing, wantCount)
	})
	// Whatever was in flight arrives before a last row.
	insert(schema(0), 1)
	testenv.WaitFor(t, 30*time.Second, "the last row", func() (bool, string) {
		return got.Len() >= wantCount+len(droppedBefore)+1, fmt.Sprintf("%d deliveries", got.Len())
	})
	counts := map[string]int{}
	for _, d := range got.All() {
		counts[d.MessageID]++
		s, ok := want[d.MessageID]
		if !ok {
			continue // a dropped tenant's row from before its DROP
		}
		if h := d.Headers[outbox.DefaultSchemaHeader]; h != s {
			t.Errorf("%s: header %s = %v, want %q", d.MessageID, outbox.DefaultSchemaHeader, h, s)
		}
	}
	for id, n := range counts {
		if n != 1 {
			t.Errorf("%s delivered %d times, want once", id, n)
		}
	}
	allowed := map[string]bool{}
	for _, id := range droppedBefore {
		allowed[id] = true
	}
	for id := range counts {
		if _, live := want[id]; !live && !allowed[id] {
			t.Errorf("%s delivered: no live tenant wrote it and no dropped tenant before its DROP", id)
		}
	}
	// Every row of every live tenant SENT.
	live := map[string]bool{}
	for _, s := range want {
		live[s] = true
	}
	testenv.WaitFor(t, 30*time.Second, "every live tenant's rows SENT", func() (bool, string) {
		notSent := 0
		for s := range live {
			notSent += base.Count(t, "SELECT COUNT(*) FROM "+s+".producer_message WHERE status <> 'SENT'")
		}
		return notSent == 0, fmt.Sprintf("%d rows not SENT in %d tenants", notSent, len(live))
	})
	if len(live) != initial-dropped+added+1 {
		t.Errorf("%d live tenants wrote rows, want %d", len(live), initial-dropped+added+1)
	}
	// What the metrics say: the tables added and dropped while streaming,
	// and those matched now.
	entry := prefix + "_*.producer_message"
	testenv.WaitFor(t, 10*time.Second, "the table metrics", func() (bool, string) {
		addedN, droppedN, matched := tableMetric(t, r, "binlog_relay_table_changes_total", entry, "added"),
			tableMetric(t, r, "binlog_relay_table_changes_total", entry, "dropped"), tableMetric(t, r, "binlog_relay_tables_matched", entry, "")
		return addedN == added+1 && droppedN == dropped && matched == initial+added+1-dropped,
			fmt.Sprintf("added %v (want %d), dropped %v (want %d), matched %v (want %d)", addedN, added+1, droppedN, dropped, matched, initial+added+1-dropped)
	})
}

// tableMetric reads one per-entry table metric of the relay (change is
// the change label, "" for a gauge without one).
func tableMetric(t *testing.T, r *relaytest.Relay, name, entry, change string) float64 {
	t.Helper()
	families, err := r.App.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if (l.GetName() == "entry" && l.GetValue() != entry) || (l.GetName() == "change" && l.GetValue() != change) {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestTenantTableThatDoesNotFitIsRefusedAlone: a tenant created while
// streaming whose table lacks a column the entry maps (routing_key) is
// refused alone: its rows are not published, the metric and /readyz say
// so (the relay stays ready), the other tenant's rows flow; an ALTER that
// adds the column has it read from the next rows on.
func TestTenantTableThatDoesNotFitIsRefusedAlone(t *testing.T) {
	testenv.Integration(t)
	base := testenv.NewDB(t, "schema/producer_message.sql")
	prefix := strings.ReplaceAll(testenv.UniqueName("tf"), "_", "")
	good, bad := prefix+"_good", prefix+"_bad"
	t.Cleanup(func() {
		for _, s := range []string{good, bad} {
			_, _ = base.Primary.Exec("DROP DATABASE IF EXISTS " + s)
		}
	})
	base.Exec(t, fmt.Sprintf("CREATE DATABASE %[1]s; CREATE TABLE %[1]s.producer_message LIKE %[2]s.producer_message", good, base.Name))
	base.WaitReplicated(t, 30*time.Second)
	br, got := testenv.NewCollectedBroker(t)
	tables := fmt.Sprintf("  - {preset: producer-message, schema: \"%s_*\", name: producer_message}\n", prefix)
	r := relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("tenantfit"), tables, noSweeper))

	row := func(s, id string, withKey bool) {
		if withKey {
			base.Exec(t, fmt.Sprintf("INSERT INTO %s.producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, 'k', '{}')", s), id, br.Exchange)
			return
		}
		base.Exec(t, fmt.Sprintf("INSERT INTO %s.producer_message (message_id, exchange, content) VALUES (?, ?, '{}')", s), id, br.Exchange)
	}
	base.Exec(t, fmt.Sprintf("CREATE DATABASE %[1]s; CREATE TABLE %[1]s.producer_message LIKE %[2]s.producer_message; ALTER TABLE %[1]s.producer_message DROP COLUMN routing_key", bad, base.Name))
	row(bad, "bad-1", false)
	row(good, "good-1", true)
	row(bad, "bad-2", false)
	row(good, "good-2", true)
	waitAllDistinct(t, got, []string{"good-1", "good-2"}, 30*time.Second)
	entry := prefix + "_*.producer_message"
	testenv.WaitFor(t, 10*time.Second, "the refused table in the metric and /readyz", func() (bool, string) {
		refused := tableMetric(t, r, "binlog_relay_tables_refused", entry, "")
		ok, why := r.App.Ready()
		note := bad + ".producer_message refused"
		said, others := false, 0
		for _, w := range why {
			if strings.Contains(w, note) {
				said = true
			} else {
				others++
			}
		}
		// The refusal is a note, never a reason to be unready: unready
		// only for something else (a Redis probe slow on a loaded
		// machine, say), which ops.Ready's own tests cover.
		notTheReason := ok || others > 0
		return refused == 1 && said && notTheReason, fmt.Sprintf("tables_refused %v, ready %v: %q", refused, ok, why)
	})
	for _, d := range got.All() {
		if strings.HasPrefix(d.MessageID, "bad-") {
			t.Errorf("%s of the refused table was published", d.MessageID)
		}
	}
	// The column added: read again from the next rows.
	base.Exec(t, fmt.Sprintf("ALTER TABLE %s.producer_message ADD COLUMN routing_key VARCHAR(255) NOT NULL DEFAULT ''", bad))
	row(bad, "bad-3", true)
	row(good, "good-3", true)
	waitAllDistinct(t, got, []string{"good-1", "good-2", "bad-3", "good-3"}, 30*time.Second)
	if d, dups := got.Distinct(); d != 4 || dups != 0 {
		t.Errorf("%d distinct, %d duplicates; want good-1..3 and bad-3 once", d, dups)
	}
}

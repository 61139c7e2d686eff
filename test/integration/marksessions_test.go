package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// The SENT marks of a batch over many tables run side by side on
// relay.mark_sessions connections. Rows of 30 tenants, one a transaction,
// round robin (so each batch names every table), while the primary kills
// the marks' connections in the middle of their statements: each killed
// mark is written again on a new session, every row arrives once and ends
// SENT, and the stream flows on (the last rows arrive after the kills).
func TestMarkSessionsKilledMidStatementAreWrittenAgain(t *testing.T) {
	testenv.Integration(t)
	base := testenv.NewDB(t, "schema/producer_message.sql")
	prefix := strings.ReplaceAll(testenv.UniqueName("ms"), "_", "")
	const tenants = 30
	schema := createTenants(t, base, prefix, tenants)

	br, got := testenv.NewCollectedBroker(t)
	tables := fmt.Sprintf("  - {preset: producer-message, schema: \"%s_*\", name: producer_message}\n", prefix)
	// The sweeper waits past the test: only the binlog path marks.
	relaytest.StartRelay(t, relaytest.Config{Name: testenv.UniqueName("marksessions"), Tables: tables,
		RelayFields: "mark_sessions: 4", Extra: "sweeper: {grace_period: 10m}\n"}.YAML())

	// The killer: any connection running a mark on these tenants.
	ctx, stop := context.WithCancel(context.Background())
	var kills atomic.Int64
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for ctx.Err() == nil {
			rows, err := base.Primary.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND INFO LIKE '%SENT%'",
				"UPDATE %"+prefix+"\\_%")
			if err != nil {
				continue // the context ended
			}
			var ids []int64
			for rows.Next() {
				var id int64
				if rows.Scan(&id) == nil {
					ids = append(ids, id)
				}
			}
			rows.Close()
			for _, id := range ids {
				if _, err := base.Primary.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err == nil {
					kills.Add(1)
				}
			}
		}
	}()

	n := 0
	insertRound := func() {
		var b strings.Builder
		for i := range tenants {
			n++
			fmt.Fprintf(&b, "INSERT INTO %s.producer_message (message_id, exchange, routing_key, content) VALUES ('%s-%d', '%s', 'tenant.event', '{}');",
				schema(i), prefix, n, br.Exchange)
		}
		base.Exec(t, b.String())
	}
	// Rounds until some marks were killed (at most two minutes of them).
	deadline := time.Now().Add(2 * time.Minute)
	for kills.Load() < 3 && time.Now().Before(deadline) {
		for range 20 {
			insertRound()
		}
		testenv.WaitFor(t, 60*time.Second, "the rounds so far", func() (bool, string) {
			return got.Len() >= n, fmt.Sprintf("%d of %d delivered", got.Len(), n)
		})
	}
	stop()
	<-killed
	if kills.Load() == 0 {
		t.Fatalf("no mark was killed in two minutes of %d rows: the test did not test anything", n)
	}
	// After the kills the stream flows on.
	for range 5 {
		insertRound()
	}
	testenv.WaitFor(t, 60*time.Second, "every row", func() (bool, string) {
		return got.Len() >= n, fmt.Sprintf("%d of %d delivered", got.Len(), n)
	})
	counts := map[string]int{}
	for _, d := range got.All() {
		counts[d.MessageID]++
	}
	for k := 1; k <= n; k++ {
		if c := counts[fmt.Sprintf("%s-%d", prefix, k)]; c != 1 {
			t.Errorf("%s-%d delivered %d times, want once", prefix, k, c)
		}
	}
	testenv.WaitFor(t, 60*time.Second, "every row SENT", func() (bool, string) {
		notSent := 0
		for i := range tenants {
			notSent += base.Count(t, "SELECT COUNT(*) FROM "+schema(i)+".producer_message WHERE status <> 'SENT'")
		}
		return notSent == 0, fmt.Sprintf("%d of %d rows not SENT", notSent, n)
	})
	t.Logf("%d rows over %d tenants, %d marks killed", n, tenants, kills.Load())
}

// createTenants makes n schemas prefix_00.. with a copy of base's
// producer_message each, replicated, dropped at the end; it returns the
// schema name of tenant i.
func createTenants(t *testing.T, base *testenv.DB, prefix string, n int) func(int) string {
	t.Helper()
	schema := func(i int) string { return fmt.Sprintf("%s_%02d", prefix, i) }
	t.Cleanup(func() {
		for i := range n {
			_, _ = base.Primary.Exec("DROP DATABASE IF EXISTS " + schema(i))
		}
	})
	var ddl strings.Builder
	for i := range n {
		fmt.Fprintf(&ddl, "CREATE DATABASE %s; CREATE TABLE %s.producer_message LIKE %s.producer_message;", schema(i), schema(i), base.Name)
	}
	base.Exec(t, ddl.String())
	base.WaitReplicated(t, 60*time.Second)
	return schema
}

// Rows of 50 tenants, one a transaction, round robin, at about 2,000 rows/s:
// each batch names every table with a few rows, so the relay keeps most
// tables' marks for a later batch (committer.coalesce) and the checkpoint
// stays before the oldest kept row. Two SIGKILLs in the middle: nothing is
// lost, each restart delivers again no more rows than were in flight at
// its kill (delivered and not SENT), first deliveries come in commit
// order, and every row ends SENT.
func TestSIGKILLsAcrossManyTenantsDuplicateOnlyRowsInFlight(t *testing.T) {
	testenv.Integration(t)
	base := testenv.NewDB(t, "schema/producer_message.sql")
	prefix := strings.ReplaceAll(testenv.UniqueName("mk"), "_", "")
	const tenants, rounds, kills = 50, 200, 2
	schema := createTenants(t, base, prefix, tenants)
	br, got := testenv.NewCollectedBroker(t)
	tables := fmt.Sprintf("  - {preset: producer-message, schema: \"%s_*\", name: producer_message}\n", prefix)
	// The sweeper waits past the test: only the binlog path sends. The
	// metrics on a port of their own (another flavour's suite may run).
	cfg := relaytest.WriteConfig(t, relaytest.Config{Name: testenv.UniqueName("manykill"), Tables: tables,
		Extra: "http: {addr: \"127.0.0.1:0\"}\nsweeper: {grace_period: 10m}\n"}.YAML())
	p := relaytest.StartedProcess(t, cfg)

	// The producer: a round of one-row transactions, one per tenant, every
	// 25 ms, on one connection (commit order is the order written).
	var mu sync.Mutex
	var want []string
	produced, stop := make(chan error, 1), make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for r := range rounds {
			select {
			case <-tick.C:
			case <-stop:
				produced <- nil
				return
			}
			var b strings.Builder
			var ids []string
			for i := range tenants {
				id := fmt.Sprintf("%s-%d-%d", prefix, r, i)
				fmt.Fprintf(&b, "INSERT INTO %s.producer_message (message_id, exchange, routing_key, content) VALUES ('%s', '%s', 'tenant.event', '{}');",
					schema(i), id, br.Exchange)
				ids = append(ids, id)
			}
			if _, err := base.Primary.Exec(b.String()); err != nil {
				produced <- err
				return
			}
			mu.Lock()
			want = append(want, ids...)
			mu.Unlock()
		}
		produced <- nil
	}()
	sent := func() int {
		n := 0
		for i := range tenants {
			n += base.Count(t, "SELECT COUNT(*) FROM "+schema(i)+".producer_message WHERE status = 'SENT'")
		}
		return n
	}

	var ks []killRecord
	for k := 1; k <= kills; k++ {
		var kr killRecord
		p, kr = killAndRestart(t, p, cfg, got, base, k*tenants*rounds/(kills+1), k, sent)
		ks = append(ks, kr)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	all := append([]string(nil), want...)
	mu.Unlock()
	waitAllDistinct(t, got, all, 3*time.Minute)
	testenv.WaitFor(t, 60*time.Second, "every row SENT", func() (bool, string) {
		n := sent()
		return n == len(all), fmt.Sprintf("%d of %d rows SENT", n, len(all))
	})
	waitQuiet(t, got, 500*time.Millisecond, 15*time.Second)

	deliveries := got.All()
	chargeDuplicates(t, deliveries, ks)
	marked := scrapeCounter(t, p, "binlog_relay_rows_marked_sent_total")
	stmts := scrapeCounter(t, p, "binlog_relay_mark_statements_total")
	var b strings.Builder
	fmt.Fprintf(&b, "%d rows over %d tenants, %d SIGKILLs; the last run marked %d rows in %d statements\n", len(all), tenants, kills, marked, stmts)
	for i, k := range ks {
		fmt.Fprintf(&b, "  kill %d after %5d deliveries: %4d rows in flight, %4d duplicates after the restart\n", i+1, k.delivered, k.inflight, k.dups)
		if k.dups > k.inflight {
			t.Errorf("kill %d: %d duplicates, more than the %d rows in flight", i+1, k.dups, k.inflight)
		}
	}
	t.Log(b.String())
	assertSameOrder(t, firstSeenOrder(deliveries), all)
}

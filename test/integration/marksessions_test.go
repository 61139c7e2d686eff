package integration

import (
	"context"
	"fmt"
	"strings"
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
	schema := func(i int) string { return fmt.Sprintf("%s_%02d", prefix, i) }
	t.Cleanup(func() {
		for i := range tenants {
			_, _ = base.Primary.Exec("DROP DATABASE IF EXISTS " + schema(i))
		}
	})
	var ddl strings.Builder
	for i := range tenants {
		fmt.Fprintf(&ddl, "CREATE DATABASE %s; CREATE TABLE %s.producer_message LIKE %s.producer_message;", schema(i), schema(i), base.Name)
	}
	base.Exec(t, ddl.String())
	base.WaitReplicated(t, 60*time.Second)

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

package integration

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// A relay paused (SIGSTOP) for longer than its sweeper's grace period
// while rows stream, then resumed (SIGCONT): its binlog reader is behind
// and catches up, and its own sweeper does not claim the rows the reader
// has not reached yet (it used to, and every one of them went out twice).
// Nothing is lost, nothing is published twice, the sweeper claims nothing.
// (The 40 s and 50,000 rows, scaled down: 8 s and 6,000 rows, a
// grace period of 3 s.)
func TestPausedRelayDoesNotSweepItsOwnBacklog(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	cfg := relaytest.WriteConfig(t, relaytest.RelayConfig(testenv.UniqueName("pause"), relaytest.SeedTable(db.Name),
		"sweeper: {interval: 200ms, grace_period: 3s}\n"))
	p := relaytest.StartedProcess(t, cfg)

	want := insertOrders(t, db, br.Exchange, "before", 10, 100)
	waitAllDistinct(t, got, want, 30*time.Second)
	signal(t, p, syscall.SIGSTOP)
	t.Cleanup(func() { _ = p.Cmd.Process.Signal(syscall.SIGCONT) })
	stopped := time.Now()
	prod := startPaced(t, db, br.Exchange, "paused", 50, 100, 40*time.Millisecond)
	want = append(want, prod.wait(t)...)
	// Paused past the grace period: every row written meanwhile is old
	// enough for the sweeper when the relay wakes.
	if rest := 8*time.Second - time.Since(stopped); rest > 0 {
		time.Sleep(rest)
	}
	signal(t, p, syscall.SIGCONT)

	waitAllDistinct(t, got, want, 60*time.Second)
	testenv.WaitFor(t, 30*time.Second, "every row SENT", func() (bool, string) {
		n := pendingIn(t, db, "producer_message")
		return n == 0, fmt.Sprintf("%d not SENT", n)
	})
	// Whatever else was published arrives before a last row.
	want = append(want, insertOrders(t, db, br.Exchange, "last", 1, 1)...)
	waitAllDistinct(t, got, want, 30*time.Second)
	claimed := 0.0
	for _, l := range logged(p, "swept rows the binlog path did not send") {
		c, _ := l["claimed"].(float64)
		claimed += c
	}
	distinct, dups := got.Distinct()
	t.Logf("paused %s; %d rows, %d distinct delivered, %d duplicates, %v claimed by the sweeper",
		(8 * time.Second).String(), len(want), distinct, dups, claimed)
	if distinct != len(want) || dups != 0 || claimed != 0 {
		t.Fatalf("%d distinct of %d, %d duplicates, %v rows claimed by the sweeper; want all once, none claimed", distinct, len(want), dups, claimed)
	}
	assertSameOrder(t, firstSeenOrder(got.All()), want)
}

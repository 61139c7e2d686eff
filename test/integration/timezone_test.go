package integration

// A primary whose clock reads another time zone than its replica's (issue
// 26, item 4). The seed table's DATETIME columns hold the primary's wall
// clock: create_time by DEFAULT CURRENT_TIMESTAMP, next_retry_time by the
// relay's retry path (NOW(3) + the backoff, on the primary). The sweeper
// asks the replica first whether a row is due, so the replica must judge
// those columns by the primary's clock, not by its own NOW().
//
// The zone is the primary's global time_zone, as a user's primary at
// +09:00 has it: every session there (the application's, the relay's)
// writes and compares in it, while the replica stays at UTC. It is set on
// the switch topology's primary (switch1), which one test holds at a time,
// and restored when the test ends; the shared servers are never touched.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// setGlobalTimeZone sets a server's global time_zone (new sessions take
// it) and restores the old value when the test ends.
func setGlobalTimeZone(t *testing.T, tp *testenv.Topology, server, zone string) {
	t.Helper()
	old := queryString(t, tp.Servers[server], "SELECT @@global.time_zone")
	tp.Exec(t, server, "SET GLOBAL time_zone = ?", zone)
	t.Cleanup(func() {
		if _, err := tp.Servers[server].Exec("SET GLOBAL time_zone = ?", old); err != nil {
			t.Errorf("%s: restoring time_zone %s: %v", server, old, err)
		}
	})
}

// utcOffset is a session's offset from UTC, by the server's clock.
func utcOffset(t *testing.T, db *sql.DB) time.Duration {
	t.Helper()
	var s int64
	if err := db.QueryRow("SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return time.Duration(s) * time.Second
}

// The primary at +09:00, its replica (the relay's source) at UTC. check
// says so; a row whose first publish failed (its exchange did not exist yet)
// is retried by the sweeper once next_retry_time has come on the primary's
// clock, within the backoff plus a bounded margin, not nine hours later.
func TestPrimaryInAnotherTimeZoneRetriesWhenDue(t *testing.T) {
	testenv.Integration(t)
	tp := testenv.NewTopology(t, "schema/producer_message.sql")
	setGlobalTimeZone(t, tp, "switch1", "+09:00")
	// A pool opened after the change: its sessions are in the primary's
	// zone, like the application's and the relay's.
	primary := testenv.Open(t, tp.DSN["switch1"], tp.DB)
	replica := testenv.Open(t, tp.DSN["switch2"], tp.DB)
	if p, r := utcOffset(t, primary), utcOffset(t, replica); p != 9*time.Hour || r == p {
		t.Fatalf("primary at %s and replica at %s from UTC: the test needs the primary at +9h and the replica elsewhere", p, r)
	}
	br, got := testenv.NewCollectedBroker(t)
	const grace = time.Second
	yaml := topologyYAML(tp, testenv.UniqueName("tz"), fmt.Sprintf("  - {preset: producer-message, schema: %s}\n", tp.DB),
		map[string]string{"sweeper": fmt.Sprintf("{interval: 100ms, grace_period: %s}", grace), "retry": "{base: 200ms, factor: 2, max: 5s}"})

	checkReportsZones(t, yaml, "+09:00", "+00:00", "9h late")

	relaytest.StartRelay(t, yaml)
	missing := testenv.UniqueName("tz_exchange")
	id := testenv.UniqueName("tz")
	if _, err := primary.Exec(`INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, 'order.created', '{}')`,
		id, missing); err != nil {
		t.Fatal(err)
	}
	// The binlog path publishes it, the broker refuses (404), and the row
	// goes to the retry path: PENDING, retry_count 1, next_retry_time set
	// on the primary.
	var status string
	var retries int
	testenv.Eventually(t, 30*time.Second, func() bool {
		if err := primary.QueryRow("SELECT status, retry_count FROM producer_message WHERE message_id = ?", id).Scan(&status, &retries); err != nil {
			t.Fatal(err)
		}
		return retries >= 1
	}, "row %s never failed once: status %s, retry_count %d", id, status, retries)
	br.DeclareBoundExchange(t, missing)

	// Due when both next_retry_time and create_time + grace have passed,
	// by the primary's clock (which wrote them).
	var dueInUS int64
	if err := primary.QueryRow(`SELECT TIMESTAMPDIFF(MICROSECOND, NOW(3), GREATEST(next_retry_time, create_time + INTERVAL ? MICROSECOND))
		FROM producer_message WHERE message_id = ?`, grace.Microseconds(), id).Scan(&dueInUS); err != nil {
		t.Fatal(err)
	}
	dueIn := max(time.Duration(dueInUS)*time.Microsecond, 0)
	const margin = 15 * time.Second
	start := time.Now()
	delivered := func() bool {
		for _, d := range got.All() {
			if d.MessageID == id {
				return true
			}
		}
		return false
	}
	testenv.WaitFor(t, dueIn+margin, fmt.Sprintf("row %s, due in %s by the primary's clock, to be retried", id, dueIn.Round(time.Millisecond)),
		func() (bool, string) {
			if delivered() {
				return true, ""
			}
			return false, rowClock(t, primary, replica, id)
		})
	late := time.Since(start) - dueIn
	testenv.Eventually(t, 10*time.Second, func() bool {
		_ = primary.QueryRow("SELECT status, retry_count FROM producer_message WHERE message_id = ?", id).Scan(&status, &retries)
		return status == "SENT"
	}, "row %s was delivered but is %s", id, status)
	if retries != 1 {
		t.Errorf("row %s SENT after %d failures, want 1", id, retries)
	}
	t.Logf("row %s retried %s after it was due (sweeper.interval 100ms)", id, late.Round(time.Millisecond))
}

// checkReportsZones runs check and wants the warning that names both
// clocks and what the primary's would cost the replica's pre-checks.
func checkReportsZones(t *testing.T, yaml, primary, replica, cost string) {
	t.Helper()
	lines := runCheck(t, yaml)
	for _, l := range lines {
		if strings.HasPrefix(l, "WARN") && strings.Contains(l, "time zone") {
			t.Logf("check: %s", l)
		}
	}
	if !findLine(lines, "WARN", "another time zone", "primary reads "+primary, "replica "+replica, "not "+cost, "SET time_zone = '"+primary+"'") {
		t.Errorf("check does not report the primary at %s and the replica at %s:\n%s", primary, replica, strings.Join(lines, "\n"))
	}
}

// The other way round: the replica (the relay's source) at +09:00, the
// primary at UTC. On the replica's clock a row looks due nine hours before
// it is, so each round would claim on the primary and find nothing (a
// SELECT ... FOR UPDATE every sweeper.interval): the primary polled, which
// the sweeper must never do. The row goes out when it is due on the
// primary's clock, after one claim.
func TestReplicaInAnotherTimeZoneDoesNotPollThePrimary(t *testing.T) {
	testenv.Integration(t)
	tp := testenv.NewTopology(t, "schema/producer_message.sql")
	setGlobalTimeZone(t, tp, "switch2", "+09:00")
	primary := tp.On(t, "switch1")
	if p, r := utcOffset(t, primary), utcOffset(t, testenv.Open(t, tp.DSN["switch2"], tp.DB)); r != 9*time.Hour || r == p {
		t.Fatalf("primary at %s and replica at %s from UTC: the test needs the replica at +9h and the primary elsewhere", p, r)
	}
	br, got := testenv.NewCollectedBroker(t)
	yaml := topologyYAML(tp, testenv.UniqueName("tzr"), fmt.Sprintf("  - {preset: producer-message, schema: %s}\n", tp.DB),
		map[string]string{"sweeper": "{interval: 100ms, grace_period: 1s}"})
	checkReportsZones(t, yaml, "+00:00", "+09:00", "9h early")

	// A row that failed once, due in 10 s, committed before the relay
	// starts (so the binlog path never sees it): the sweeper's.
	const retryIn = 10 * time.Second
	id := testenv.UniqueName("tzr")
	if _, err := primary.Exec(`INSERT INTO producer_message (message_id, exchange, routing_key, content, retry_count, create_time, next_retry_time)
		VALUES (?, ?, 'order.created', '{}', 1, NOW(3) - INTERVAL 1 HOUR, NOW(3) + INTERVAL ? MICROSECOND)`, id, br.Exchange, retryIn.Microseconds()); err != nil {
		t.Fatal(err)
	}
	tp.WaitReplicated(t, "switch2", 30*time.Second)
	counter, yaml := countStatements(t, yaml, "primary", tp.DSN["switch1"])
	relaytest.StartRelay(t, yaml)
	counter.Reset()
	start := time.Now()
	testenv.WaitFor(t, retryIn+15*time.Second, fmt.Sprintf("row %s, due %s after it was committed, to be sent", id, retryIn), func() (bool, string) {
		for _, d := range got.All() {
			if d.MessageID == id {
				return true, ""
			}
		}
		return false, fmt.Sprintf("relay statements on the primary %v", counter.Counts())
	})
	took, seen := time.Since(start), counter.Counts()
	t.Logf("row %s sent %s after the relay started; relay statements on the primary meanwhile: %v", id, took.Round(time.Millisecond), seen)
	// The claim that took it, and perhaps the sweeper's read of the
	// primary's zone; not one claim per 100 ms round.
	if seen["SELECT"] > 3 {
		t.Errorf("the relay sent the primary %d SELECTs before the row was due: the sweeper claimed on the replica's clock", seen["SELECT"])
	}
}

// rowClock describes a row's times and both servers' clocks, for a failure.
func rowClock(t *testing.T, primary, replica *sql.DB, id string) string {
	t.Helper()
	q := "SELECT CONCAT(status, ' retry_count ', retry_count, ' create_time ', create_time, ' next_retry_time ', COALESCE(next_retry_time, 'NULL'), ' NOW() ', NOW(3)) FROM producer_message WHERE message_id = ?"
	var p, r string
	_ = primary.QueryRowContext(context.Background(), q, id).Scan(&p)
	_ = replica.QueryRowContext(context.Background(), q, id).Scan(&r)
	return fmt.Sprintf("on the primary: %s; on the replica: %s", p, r)
}

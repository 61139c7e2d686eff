package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// pacedProducer inserts txs transactions of perTx rows at about rate rows
// per second, in the background, recording the message ids in commit order.
type pacedProducer struct {
	producer
	stop chan struct{}
}

func startPacedProducer(t *testing.T, db *testenv.DB, exchange, prefix string, txs, perTx, rate int) *pacedProducer {
	p := &pacedProducer{producer: producer{producerState: producerState{done: make(chan struct{})}}, stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(p.done)
		tick := time.NewTicker(time.Second * time.Duration(perTx) / time.Duration(rate))
		defer tick.Stop()
		for i := 0; i < txs; i++ {
			select {
			case <-tick.C: // the pace
			case <-p.stop:
				return
			}
			stmt, batch := orderInsert(exchange, prefix, i, perTx)
			if _, err := db.Primary.Exec(stmt); err != nil {
				p.fail(err)
				return
			}
			p.mu.Lock()
			p.ids = append(p.ids, batch...)
			p.mu.Unlock()
		}
	}()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(p.stop) }); p.wg.Wait() })
	return p
}

// waitQuiet waits until no delivery arrived for quiet (the broker has
// handed on what it held), within a deadline.
func waitQuiet(t *testing.T, got *testenv.Collector, quiet, within time.Duration) {
	t.Helper()
	n, since, end := got.Len(), time.Now(), time.Now().Add(within)
	for time.Now().Before(end) {
		if m := got.Len(); m != n {
			n, since = m, time.Now()
		} else if time.Since(since) >= quiet {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling the collector
	}
	t.Fatalf("deliveries still arriving after %s (%d so far)", within, got.Len())
}

// Issue 27: 100,000 rows at 5,000 rows/s with five SIGKILLs of the relay,
// with the shipped checkpoint and flush intervals. After each kill the rows
// in flight are the ones delivered but not marked SENT (published by the
// killed run, confirmed or not, never marked): those are the only rows a
// restart may deliver again. Each restart's duplicates are counted apart
// and must not exceed them; nothing is lost; first deliveries are in
// commit order.
func TestFiveSIGKILLsDuplicateOnlyRowsInFlight(t *testing.T) {
	testenv.Integration(t)
	testenv.LockHeavy(t)
	testenv.PurgeBinlogs(t) // a long run: leave no gigabytes of binlog behind
	const rows, perTx, rate, kills = 100_000, 50, 5_000, 5
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("dupkill")
	cfg := relaytest.WriteConfig(t, relaytest.Config{Name: name, Tables: relaytest.SeedTable(db.Name),
		// The shipped checkpoint and flush intervals, as in production.
		Sections: map[string]string{"checkpoint": "", "relay": ""}}.YAML())
	p := relaytest.StartedProcess(t, cfg)
	prod := startPacedProducer(t, db, br.Exchange, "d", rows/perTx, perTx, rate)

	var ks []killRecord
	for k := 1; k <= kills; k++ {
		var kr killRecord
		p, kr = killAndRestart(t, p, cfg, got, db, k*rows/(kills+2), k, func() int { return statusCounts(t, db.Primary)["SENT"] })
		ks = append(ks, kr)
	}
	want := prod.wait(t)
	waitAllDistinct(t, got, want, 3*time.Minute)
	testenv.Eventually(t, 30*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) },
		"statuses: %v", statusCounts(t, db.Primary))
	waitQuiet(t, got, 500*time.Millisecond, 15*time.Second)

	all := got.All()
	total := chargeDuplicates(t, all, ks)
	var b strings.Builder
	fmt.Fprintf(&b, "%d rows at %d rows/s, %d SIGKILLs: %d duplicates in all, 0 lost\n", len(want), rate, kills, total)
	for i, k := range ks {
		fmt.Fprintf(&b, "  kill %d after %6d deliveries: %5d rows in flight, %5d duplicates after the restart\n", i+1, k.delivered, k.inflight, k.dups)
	}
	t.Log(b.String())
	for i, k := range ks {
		if k.dups > k.inflight {
			t.Errorf("kill %d: %d duplicates, more than the %d rows in flight", i+1, k.dups, k.inflight)
		}
	}
	assertSameOrder(t, firstSeenOrder(all), want)
}

// killAndRestart waits until at rows are delivered, SIGKILLs p (kill k),
// waits for what the killed run published to reach the queue, counts the
// rows in flight (delivered and not SENT: sent counts the SENT rows, and a
// row is SENT only after its confirm), lets the replica apply the last
// marks, as it would in the seconds a real restart takes, and starts the
// relay again from cfg.
func killAndRestart(t *testing.T, p *relaytest.Process, cfg string, got *testenv.Collector, db *testenv.DB, at, k int, sent func() int) (*relaytest.Process, killRecord) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, func() bool { return got.Len() >= at }, "only %d delivered before kill %d", got.Len(), k)
	signal(t, p, syscall.SIGKILL)
	if _, err := p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, got, 500*time.Millisecond, 15*time.Second)
	distinct, _ := got.Distinct()
	inflight := distinct - sent()
	db.WaitReplicated(t, 30*time.Second)
	kr := killRecord{delivered: got.Len(), inflight: inflight, restartAt: got.Len()}
	return relaytest.StartedProcess(t, cfg), kr
}

// killRecord is one SIGKILL of a kill test: the deliveries before it, the
// rows in flight then (delivered, not SENT), where the restart's
// deliveries begin, and the duplicates charged to that restart.
type killRecord struct{ delivered, inflight, restartAt, dups int }

// chargeDuplicates charges each delivery of a message delivered before to
// the restart it came after (ks in order), and returns how many there
// were; one before the first kill is an error.
func chargeDuplicates(t *testing.T, all []testenv.Delivery, ks []killRecord) int {
	t.Helper()
	seen := map[string]bool{}
	total := 0
	for i, d := range all {
		if !seen[d.MessageID] {
			seen[d.MessageID] = true
			continue
		}
		total++
		k := len(ks) - 1
		for k > 0 && i < ks[k].restartAt {
			k--
		}
		if i < ks[0].restartAt {
			t.Errorf("delivery %d (%s) is a duplicate before the first kill", i, d.MessageID)
			continue
		}
		ks[k].dups++
	}
	return total
}

// Issue 27: a checkpoint that went back (a Redis failover that lost the
// last saves, a restore): the rows between it and the stream's head were
// published and marked SENT, and the replica shows it. The restart reads
// them again but does not publish them: no duplicate, the skipped rows
// counted in the log once; rows committed after the restart are published.
func TestReplayedRowsAlreadySentAreNotPublishedAgain(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("skipsent")
	key := "binlog-relay:" + name + ":checkpoint"
	cfg := relaytest.WriteConfig(t, relaytest.RelayConfig(name, relaytest.SeedTable(db.Name), ""))
	p := relaytest.StartedProcess(t, cfg)
	first := insertOrders(t, db, br.Exchange, "s1", 1, 10)
	waitDeliveredOnceInOrder(t, got, first, 30*time.Second)
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(first) },
		"statuses: %v", statusCounts(t, db.Primary))
	waitCheckpointCovers(t, key, primaryGTID(t, db))
	old, err := loadCheckpoint(t, key)
	if err != nil {
		t.Fatal(err)
	}
	// 3,000 rows published and marked after the old checkpoint.
	second := insertOrders(t, db, br.Exchange, "s2", 30, 100)
	waitDeliveredOnceInOrder(t, got, append(append([]string(nil), first...), second...), 60*time.Second)
	testenv.Eventually(t, 30*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(first)+len(second) },
		"statuses: %v", statusCounts(t, db.Primary))
	signal(t, p, syscall.SIGTERM)
	if code, err := p.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("stop: exit %d, %v", code, err)
	}
	db.WaitReplicated(t, 30*time.Second)
	// The checkpoint goes back to before the 3,000 rows.
	b, err := old.Encode()
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := testenv.NewRedis(t, "")
	if err := rc.Set(context.Background(), key, b, 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := got.Len()
	p = relaytest.StartedProcess(t, cfg)
	third := insertOrders(t, db, br.Exchange, "s3", 1, 10)
	all := append(append(append([]string(nil), first...), second...), third...)
	waitDeliveredOnceInOrder(t, got, all, 60*time.Second)
	// Delivered, the third rows show the Run had read the primary's position
	// before them or after: this transaction comes after it.
	fourth := insertOrders(t, db, br.Exchange, "s4", 1, 10)
	all = append(all, fourth...)
	waitDeliveredOnceInOrder(t, got, all, 60*time.Second)
	if n := got.Len() - before; n != len(third)+len(fourth) {
		t.Errorf("after the restart from the old checkpoint %d deliveries, want only the %d new rows", n, len(third)+len(fourth))
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(p.LogText(), `"skipped":3000`)
	}, "no log line with the 3,000 skipped rows; log:\n%s", p.LogText())
	if n := strings.Count(p.LogText(), "replayed rows already SENT were not published again"); n != 1 {
		t.Errorf("the skip is logged %d times, want once", n)
	}
	// The rows written after the restart end the check: their transaction
	// is outside the primary's position read at the start.
	if !strings.Contains(p.LogText(), `"ended_at":"a transaction committed after the start"`) {
		t.Errorf("the check did not end at the transaction committed after the start; log:\n%s", p.LogText())
	}
	// And it says how long it waited for the replica before its first read.
	if !strings.Contains(p.LogText(), `"waited_for_replica":`) {
		t.Errorf("the check's log line does not say how long it waited for the replica; log:\n%s", p.LogText())
	}
	cp, err := loadCheckpoint(t, key)
	if err != nil || cp.Position() == old.Position() {
		t.Errorf("checkpoint did not move past the old one: %+v, %v", cp, err)
	}
}

// Issue 27: the same run as TestFiveSIGKILLsDuplicateOnlyRowsInFlight into
// a RabbitMQ stream (broker.stream): each row takes a publishing id in
// binlog order, saved with the checkpoint, and a restart replays the same
// ids, which the broker drops. A stream consumer reads every row once, in
// commit order: 0 duplicates, 0 lost.
func TestFiveSIGKILLsIntoAStreamDeliverEachRowOnce(t *testing.T) {
	testenv.Integration(t)
	testenv.LockHeavy(t)
	testenv.PurgeBinlogs(t)
	const rows, perTx, rate, kills = 100_000, 50, 5_000, 5
	db := testenv.NewDB(t, "schema/producer_message.sql")
	streamName := testenv.UniqueName("relay_stream")
	t.Cleanup(func() { testenv.DeleteStream(t, streamName) })
	name := testenv.UniqueName("streamkill")
	key := "binlog-relay:" + name + ":checkpoint"
	cfg := relaytest.WriteConfig(t, relaytest.Config{Name: name, Tables: relaytest.SeedTable(db.Name), Sections: map[string]string{
		"checkpoint": "", "relay": "",
		"broker": fmt.Sprintf("{url: %q, stream: {name: %s, uri: %q}}", testenv.AMQPURL, streamName, testenv.StreamURI(testenv.StreamAddr())),
	}}.YAML())
	p := relaytest.StartedProcess(t, cfg)
	start := time.Now()
	prod := startPacedProducer(t, db, "unused", "q", rows/perTx, perTx, rate)
	sent := func() int { return statusCounts(t, db.Primary)["SENT"] }
	for k := 1; k <= kills; k++ {
		at := k * rows / (kills + 2)
		testenv.Eventually(t, 90*time.Second, func() bool { return sent() >= at }, "only %d rows SENT before kill %d", sent(), k)
		signal(t, p, syscall.SIGKILL)
		if _, err := p.Wait(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		p = relaytest.StartedProcess(t, cfg)
	}
	want := prod.wait(t)
	t.Logf("produced in %s", time.Since(start).Round(time.Millisecond))
	testenv.Eventually(t, 3*time.Minute, func() bool { return sent() == len(want) }, "statuses: %v", statusCounts(t, db.Primary))
	t.Logf("all SENT after %s", time.Since(start).Round(time.Millisecond))
	waitCheckpointCovers(t, key, primaryGTID(t, db))
	began := time.Now()
	got := testenv.ReadStreamIDs(t, streamName, time.Minute)
	t.Logf("read the stream in %s", time.Since(began).Round(time.Millisecond))
	seen, dups := map[string]bool{}, 0
	var order []string
	for _, id := range got {
		if seen[id] {
			dups++
			continue
		}
		seen[id] = true
		order = append(order, id)
	}
	t.Logf("%d rows at %d rows/s into stream %s, %d SIGKILLs: the stream holds %d messages, %d distinct, %d duplicates",
		len(want), rate, streamName, kills, len(got), len(seen), dups)
	if dups != 0 || len(seen) != len(want) {
		t.Fatalf("the stream holds %d distinct rows of %d with %d duplicates; want each once", len(seen), len(want), dups)
	}
	assertSameOrder(t, order, want)
	if cp, err := loadCheckpoint(t, key); err != nil || cp.Seq != uint64(len(want)) || cp.SeqScope == "" {
		t.Errorf("checkpoint publishing id %d (scope %q), want %d: %v", cp.Seq, cp.SeqScope, len(want), err)
	}
}

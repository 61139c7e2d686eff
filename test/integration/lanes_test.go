package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// lanesTable is the seed table keyed by its routing_key column, which the
// tests here fill with the ordering key.
func lanesTable(db string) string {
	return fmt.Sprintf("  - {preset: producer-message, schema: %s, route: {partition_key: routing_key}}\n", db)
}

// keyedRow is one row a keyedProducer committed: its message id (the
// number in it is the commit order), key and transaction GTID.
type keyedRow struct {
	id, key, gtid string
	seq           int
}

// keyedProducer commits txs transactions of perTx rows, each row for a
// key drawn from keys, routing_key = key, on one connection so that
// @@last_gtid names each transaction.
type keyedProducer struct {
	producerState
	rows []keyedRow
}

func startKeyedProducer(t *testing.T, db *testenv.DB, exchange, prefix string, txs, perTx, keys int, seed uint64) *keyedProducer {
	t.Helper()
	conn, err := db.Primary.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := &keyedProducer{producerState: producerState{done: make(chan struct{})}}
	rng := rand.New(rand.NewPCG(seed, 2))
	go func() {
		defer close(p.done)
		defer conn.Close()
		seq := 0
		for i := 0; i < txs; i++ {
			batch := make([]keyedRow, perTx)
			stmt := outboxInsert(0, perTx, func(j int) string {
				seq++
				batch[j] = keyedRow{id: fmt.Sprintf("%s-%07d", prefix, seq), key: fmt.Sprintf("key-%05d", rng.IntN(keys)), seq: seq}
				return fmt.Sprintf("('%s', '%s', '%s', '{\"n\":%d}')", batch[j].id, exchange, batch[j].key, seq)
			})
			gtid, err := execLastGTID(conn, stmt, true)
			if err != nil {
				p.fail(err)
				return
			}
			p.mu.Lock()
			for j := range batch {
				batch[j].gtid = gtid
			}
			p.rows = append(p.rows, batch...)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { <-p.done })
	return p
}

func (p *keyedProducer) wait(t *testing.T) []keyedRow {
	t.Helper()
	<-p.done
	if p.err != nil {
		t.Fatalf("producer: %v", p.err)
	}
	return p.rows
}

// assertKeyOrder fails unless, for every key, the first deliveries of its
// rows came in commit order; it returns the rows never delivered.
func assertKeyOrder(t *testing.T, msgs []testenv.Delivery, rows []keyedRow) (missing int) {
	t.Helper()
	byID := make(map[string]keyedRow, len(rows))
	for _, r := range rows {
		byID[r.id] = r
	}
	seen := make(map[string]bool, len(rows))
	last := map[string]keyedRow{}
	for _, m := range msgs {
		r, ok := byID[m.MessageID]
		if !ok || seen[m.MessageID] {
			continue
		}
		seen[m.MessageID] = true
		if r.key != m.RoutingKey {
			t.Fatalf("%s arrived with routing key %q, want its key %q", r.id, m.RoutingKey, r.key)
		}
		if prev, ok := last[r.key]; ok && prev.seq > r.seq {
			t.Fatalf("key %s: %s (commit #%d) first arrived after %s (commit #%d)", r.key, r.id, r.seq, prev.id, prev.seq)
		}
		last[r.key] = r
	}
	return len(rows) - len(seen)
}

// killed is one SIGKILL: when, and the checkpoint the relay had saved.
type killed struct {
	at        time.Time
	cpFlavor  string
	cpGTIDSet string
}

// restartAfterWholeSecond waits past the second the kill happened in: the
// router stamps every message with its routing time in whole seconds, so
// the messages of each run of the relay can be told apart afterwards.
func restartAfterWholeSecond(t *testing.T, cfg string, k killed) (*relaytest.Process, time.Time) {
	t.Helper()
	time.Sleep(time.Until(k.at.Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	started := time.Now()
	p := relaytest.StartedProcess(t, cfg)
	return p, started
}

// inflightAtKills counts, for each kill, the distinct rows the killed run
// delivered whose transaction its saved checkpoint did not cover: exactly
// the rows the next run publishes again.
func inflightAtKills(t *testing.T, msgs []testenv.Delivery, rows []keyedRow, starts []time.Time, kills []killed) []int {
	t.Helper()
	gtid := make(map[string]string, len(rows))
	for _, r := range rows {
		gtid[r.id] = r.gtid
	}
	run := func(ts time.Time) int { // index of the run that published a message
		i := 0
		for j, s := range starts {
			if ts.Unix() >= s.Unix() {
				i = j
			}
		}
		return i
	}
	out := make([]int, len(kills))
	counted := map[string]bool{}
	for _, m := range msgs {
		i := run(m.Timestamp)
		key := fmt.Sprint(i, m.MessageID)
		g, ok := gtid[m.MessageID]
		if i >= len(kills) || !ok || counted[key] {
			continue
		}
		counted[key] = true
		covered := false
		if k := kills[i]; k.cpGTIDSet != "" {
			var err error
			if covered, err = binlog.ContainsGTID(k.cpFlavor, k.cpGTIDSet, g); err != nil {
				t.Fatal(err)
			}
		}
		if !covered {
			out[i]++
		}
	}
	return out
}

// Per-key lanes through two SIGKILLs: 200,000 rows over 10,000 keys on 4
// lanes, the relay killed twice while it drains. Every row arrives, the
// first deliveries of each key are in commit order, and the duplicates are
// at most the rows each killed run had delivered past its checkpoint.
func TestLanesSurviveTwoSIGKILLs(t *testing.T) {
	testenv.Integration(t)
	testenv.LockHeavy(t)
	testenv.PurgeBinlogs(t) // a long run: leave no gigabytes of binlog behind
	began := time.Now()
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("lanes_kill")
	key := "binlog-relay:" + name + ":checkpoint"
	// The sweeper sends what the binlog path has not sent within its grace
	// period; on a loaded machine this 200,000-row run can fall that far
	// behind, and the sweeper's copies are not the in-flight duplicates this
	// test bounds. A grace period longer than the test keeps it out.
	cfg := relaytest.WriteConfig(t, relaytest.Config{Name: name, Tables: lanesTable(db.Name), RelayFields: "lanes: 4",
		Extra: "http: {addr: \"127.0.0.1:0\"}\nsweeper: {grace_period: 30m}\n"}.YAML())
	starts := []time.Time{time.Now()}
	p := relaytest.StartedProcess(t, cfg)

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	const txs, perTx, keys = 2000, 100, 10000
	prod := startKeyedProducer(t, db, br.Exchange, "ln", txs, perTx, keys, seed)
	var kills []killed
	for _, at := range []int{50000, 120000} {
		testenv.Eventually(t, 90*time.Second, func() bool { return got.Len() >= at }, "only %d delivered before kill %d", got.Len(), len(kills)+1)
		signal(t, p, syscall.SIGKILL)
		if _, err := p.Wait(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		k := killed{at: time.Now()}
		if cp, err := loadCheckpoint(t, key); err == nil {
			k.cpFlavor, k.cpGTIDSet = cp.Flavor, cp.GTIDSet
		}
		kills = append(kills, k)
		var started time.Time
		p, started = restartAfterWholeSecond(t, cfg, k)
		starts = append(starts, started)
	}
	rows := prod.wait(t)
	last := primaryGTID(t, db)
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	waitAllDistinct(t, got, ids, 120*time.Second)
	msgs := got.All()
	if missing := assertKeyOrder(t, msgs, rows); missing != 0 {
		t.Fatalf("%d of %d rows never arrived", missing, len(rows))
	}
	distinct, dups := got.Distinct()
	inflight := inflightAtKills(t, msgs, rows, starts, kills)
	allowed := 0
	for _, n := range inflight {
		allowed += n
	}
	t.Logf("%d rows over %d keys on 4 lanes: %d distinct, %d duplicates; in flight past the checkpoint at each kill %v; %s in all",
		len(rows), keys, distinct, dups, inflight, time.Since(began).Round(time.Second))
	if dups > allowed {
		t.Fatalf("%d duplicates, more than the %d rows in flight at the kills %v", dups, allowed, inflight)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(rows) },
		"statuses: %v", statusCounts(t, db.Primary))
	waitCheckpointCovers(t, key, last)
	// The last run counts what it published again that an earlier run
	// had marked SENT already: duplicates, within those the kills allow.
	already := scrapeCounter(t, p, "binlog_relay_published_already_sent_total")
	t.Logf("the last run counted %d of its rows as already SENT", already)
	if already > allowed {
		t.Fatalf("binlog_relay_published_already_sent_total %d, more than the %d rows in flight at the kills", already, allowed)
	}
}

// scrapeCounter sums a counter's series on a relay process's /metrics.
func scrapeCounter(t *testing.T, p *relaytest.Process, name string) int {
	t.Helper()
	line := waitLogged(t, p, "metrics and health endpoints listening", 1, 10*time.Second)
	_, body, err := get(fmt.Sprintf("http://%s/metrics", line["addr"]))
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				total += v
			}
		}
	}
	return int(total)
}

// keyLane is the lane (of n) a key hashes to.
func keyLane(key string, n int) int {
	l, _ := relay.LaneOf(&router.Message{PartitionKey: key, Keyed: true}, n)
	return l
}

// Strict ordering per key: a row to a missing exchange holds its own lane
// only. The rows of keys on the other lanes keep arriving; nothing behind
// the held row on its lane (its own key's next row included) overtakes it;
// once the exchange exists the held row goes, then the rest, each key in
// commit order.
func TestStrictLanesHoldOnlyThePoisonedLane(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	missing := testenv.UniqueName("ex_later")
	r := relaytest.StartRelay(t, relaytest.Config{Name: testenv.UniqueName("lanes_strict"),
		Tables: lanesTable(db.Name), RelayFields: "lanes: 4", Strict: true, Extra: "retry: {base: 100ms, max: 400ms}\n"}.YAML())

	const lanes, poison = 4, "key-poison"
	held := keyLane(poison, lanes)
	insert := func(id, exchange, key string) {
		db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, ?, '{}')", id, exchange, key)
	}
	insert("p1", br.Exchange, poison)
	insert("p2", missing, poison) // its exchange does not exist yet
	insert("p3", br.Exchange, poison)
	var order []keyedRow // commit order of every row after p2
	order = append(order, keyedRow{id: "p3", key: poison})
	var others, behind int // rows of other lanes; rows of the held lane after p2
	for i := 0; i < 400; i++ {
		k := keyedRow{id: fmt.Sprintf("o-%03d", i), key: fmt.Sprintf("key-%02d", i%40), seq: i + 1}
		insert(k.id, br.Exchange, k.key)
		order = append(order, k)
		if keyLane(k.key, lanes) == held {
			behind++
		} else {
			others++
		}
	}
	onOtherLanes := func() int {
		n := 0
		for _, m := range got.All() {
			if strings.HasPrefix(m.MessageID, "o-") && keyLane(m.RoutingKey, lanes) != held {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return onOtherLanes() >= others },
		"%d of the %d rows on the other lanes arrived while lane %d held", onOtherLanes(), others, held)
	for _, m := range got.All() {
		if m.MessageID != "p1" && keyLane(m.RoutingKey, lanes) == held {
			t.Fatalf("%s (key %s, lane %d) arrived while its lane held behind p2", m.MessageID, m.RoutingKey, held)
		}
	}
	var h publisher.Hold
	testenv.Eventually(t, 10*time.Second, func() bool {
		var ok bool
		h, ok = r.App.Relay().Holding()
		return ok && h.MessageID == "p2" && h.Lane == fmt.Sprintf("lane %d of 4", held)
	}, "Holding() = %+v; want p2 on lane %d of 4", h, held)
	// What /readyz says once the hold lasts past its grace period.
	if why := relay.HoldReason(h, time.Now()); !strings.Contains(why, fmt.Sprintf("lane %d of 4 holds behind message \"p2\" to exchange %q", held, missing)) {
		t.Errorf("hold reason %q, want the held lane named", why)
	}
	t.Logf("lane %d held behind p2 (%d rows behind it there); %d rows of the other lanes arrived meanwhile", held, behind, others)

	br.DeclareBoundExchange(t, missing) // fix it
	testenv.Eventually(t, 30*time.Second, func() bool { d, _ := got.Distinct(); return d >= 403 }, "delivered %d of 403", got.Len())
	msgs := got.All()
	var poisonOrder []string
	for _, m := range msgs {
		if m.RoutingKey == poison {
			poisonOrder = append(poisonOrder, m.MessageID)
		}
	}
	if strings.Join(poisonOrder, ",") != "p1,p2,p3" {
		t.Fatalf("key %s arrived as %v, want p1,p2,p3", poison, poisonOrder)
	}
	for i := range order {
		order[i].seq = i + 1
	}
	if n := assertKeyOrder(t, msgs, order); n != 0 {
		t.Fatalf("%d rows missing", n)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == 403 },
		"statuses: %v", statusCounts(t, db.Primary))
}

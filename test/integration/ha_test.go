package integration

// High availability: the leader lease, fenced checkpoints, replica failover
// and the Redis outage window (docs/ha.md). Relays run as processes so they
// can be killed and paused.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// haTTL is the lease TTL in these tests: a standby takes over about this
// long after the leader dies.
const haTTL = 3 * time.Second

// relayYAML is the stack config with the source line replaced (when source
// is not empty) and extra top-level sections.
func relayYAML(name, db, source, extra string) string {
	c := relaytest.Config{Name: name, Tables: relaytest.SeedTable(db), Extra: extra,
		Sections: map[string]string{"http": `{addr: "off"}`}}
	if source != "" {
		c.Sections["source"] = source
	}
	return c.YAML()
}

func haYAML(name, db string) string {
	return relayYAML(name, db, "", fmt.Sprintf("ha: {enabled: true, lease_ttl: %s}", haTTL))
}

// logged returns the process's JSON log lines whose msg is msg.
func logged(p *relaytest.Process, msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.LogText()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func waitLogged(t *testing.T, p *relaytest.Process, msg string, n int, within time.Duration) map[string]any {
	t.Helper()
	testenv.Eventually(t, within, func() bool { return len(logged(p, msg)) >= n },
		"relay did not log %q (%d times):\n%s", msg, n, tailText(p.LogText(), 3000))
	return logged(p, msg)[n-1]
}

func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// startPaced inserts txs transactions of perTx rows, one every `every`.
func startPaced(t *testing.T, db *testenv.DB, exchange, prefix string, txs, perTx int, every time.Duration) *producer {
	return startPacedGTIDs(t, db, exchange, prefix, txs, perTx, every, nil)
}

// startPacedGTIDs is startPaced recording each row's transaction GTID
// (MariaDB's @@last_gtid) in gtids, which must not be read before the
// producer is done.
func startPacedGTIDs(t *testing.T, db *testenv.DB, exchange, prefix string, txs, perTx int, every time.Duration, gtids map[string]string) *producer {
	p := &producer{producerState: producerState{done: make(chan struct{})}}
	conn, err := db.Primary.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(p.done)
		defer conn.Close()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; i < txs; i++ {
			<-tick.C
			stmt, batch := orderInsert(exchange, prefix, i, perTx)
			gtid, err := execLastGTID(conn, stmt, gtids != nil)
			if err != nil {
				p.fail(err)
				return
			}
			p.mu.Lock()
			p.ids = append(p.ids, batch...)
			for _, id := range batch {
				if gtids != nil {
					gtids[id] = gtid
				}
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.wg.Wait)
	return p
}

func waitAllDistinct(t *testing.T, got *testenv.Collector, want []string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, func() bool { d, _ := got.Distinct(); return d >= len(want) },
		"distinct delivered %d of %d", func() int { d, _ := got.Distinct(); return d }(), len(want))
}

func signal(t *testing.T, p *relaytest.Process, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("sending %s: %v", sig, err)
	}
}

// Test 1: two relays, one Redis. Only the leader streams; SIGKILL it and
// the standby takes over within 10 s; no row is lost across the switch.
func TestLeaderTakeoverAfterKill(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("ha")
	cfg := relaytest.WriteConfig(t, haYAML(name, db.Name))
	a := relaytest.StartProcess(t, cfg)
	waitLogged(t, a, "leader lease acquired", 1, 30*time.Second)
	a.WaitStarted(t)
	b := relaytest.StartProcess(t, cfg)
	waitLogged(t, b, "standby: another relay holds the leader lease; waiting", 1, 30*time.Second)

	gtids := map[string]string{}
	prod := startPacedGTIDs(t, db, br.Exchange, "ha", 400, 10, 10*time.Millisecond, gtids) // 1000 rows/s for 4 s
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= 1500 }, "only %d delivered before the kill", got.Len())
	if strings.Contains(b.LogText(), "binlog stream connected") {
		t.Fatalf("the standby streams while the leader runs:\n%s", b.LogText())
	}
	signal(t, a, syscall.SIGKILL)
	killed := time.Now()
	if _, err := a.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	saved, err := loadCheckpoint(t, "binlog-relay:"+name+":checkpoint") // what the standby resumes from
	if err != nil {
		t.Fatal(err)
	}
	waitLogged(t, b, "leader lease acquired", 1, 10*time.Second)
	// What the dead leader got delivered: taken once the standby holds the
	// lease (the lease TTL after the kill), so messages the broker had
	// confirmed but not yet delivered when the leader died are counted
	// too. Anything the standby has already republished by now is a second
	// copy of one of these and counts once below.
	beforeKill := got.Len()
	b.WaitStarted(t)
	takeover := time.Since(killed)
	if takeover > 10*time.Second {
		t.Fatalf("standby streaming %s after the leader was killed, want within 10s", takeover)
	}
	want := prod.wait(t)
	waitAllDistinct(t, got, want, 60*time.Second)
	distinct, dups := got.Distinct()
	t.Logf("takeover %s after SIGKILL; %d rows, %d distinct delivered, %d duplicates (delivered before the kill: %d)",
		takeover.Round(time.Millisecond), len(want), distinct, dups, beforeKill)
	assertSameOrder(t, firstSeenOrder(got.All()), want)
	// The crash's cost: only rows after the last saved checkpoint come
	// again, and at most those the dead leader had delivered.
	seen, since := map[string]int{}, 0
	for _, d := range got.All()[:beforeKill] {
		if seen[d.MessageID]++; seen[d.MessageID] > 1 {
			continue
		}
		if ok, _ := binlog.ContainsGTID(saved.Flavor, saved.GTIDSet, gtids[d.MessageID]); !ok {
			since++
		}
	}
	clear(seen)
	for _, d := range got.All() {
		if seen[d.MessageID]++; seen[d.MessageID] == 2 {
			if ok, _ := binlog.ContainsGTID(saved.Flavor, saved.GTIDSet, gtids[d.MessageID]); ok {
				t.Fatalf("%s (transaction %s) was published again though the checkpoint %s covers it", d.MessageID, gtids[d.MessageID], saved.GTIDSet)
			}
		}
	}
	t.Logf("delivered after the last checkpoint before the kill: %d; published again: %d", since, dups)
	if dups > since {
		t.Fatalf("%d duplicates: more than the %d rows delivered after the last saved checkpoint", dups, since)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) },
		"statuses: %v", statusCounts(t, db.Primary))
	waitCheckpointCovers(t, "binlog-relay:"+name+":checkpoint", primaryGTID(t, db))
}

// Test 2: a leader paused with SIGSTOP past its lease and then resumed
// publishes nothing more and cannot write the checkpoint; it goes back to
// being a standby and takes over again when the new leader dies.
func TestDeposedLeaderIsFenced(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("deposed")
	key := "binlog-relay:" + name + ":checkpoint"
	cfg := relaytest.WriteConfig(t, haYAML(name, db.Name))
	a := relaytest.StartProcess(t, cfg)
	acq := waitLogged(t, a, "leader lease acquired", 1, 30*time.Second)
	a.WaitStarted(t)
	b := relaytest.StartProcess(t, cfg)
	waitLogged(t, b, "standby: another relay holds the leader lease; waiting", 1, 30*time.Second)

	first := startProducer(t, db, br.Exchange, "d1", 50, 20).wait(t)
	waitAllDistinct(t, got, first, 30*time.Second)
	waitCheckpointCovers(t, key, primaryGTID(t, db))

	// Pause a past its lease: b takes over; rows written meanwhile reach
	// a's socket too and would be published again if a did not stop.
	signal(t, a, syscall.SIGSTOP)
	t.Cleanup(func() { _ = a.Cmd.Process.Signal(syscall.SIGCONT) })
	waitLogged(t, b, "leader lease acquired", 1, 3*haTTL)
	b.WaitStarted(t)
	second := startProducer(t, db, br.Exchange, "d2", 50, 20).wait(t)
	waitAllDistinct(t, got, append(first, second...), 30*time.Second)
	waitCheckpointCovers(t, key, primaryGTID(t, db))
	before, err := loadCheckpoint(t, key)
	if err != nil {
		t.Fatal(err)
	}

	// a resumes at a position behind b's: a write from it would move the
	// checkpoint back. Watch it (b's saves still move it forward, with
	// other tests' traffic on the shared primary).
	signal(t, a, syscall.SIGCONT)
	prev := before
	watchUntil := time.Now().Add(3 * time.Second)
	for time.Now().Before(watchUntil) || len(logged(a, "no longer the leader: stopped publishing; waiting to lead again")) == 0 {
		cp, err := loadCheckpoint(t, key)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := binlog.ContainsGTID(cp.Flavor, cp.GTIDSet, prev.GTIDSet); err != nil || !ok {
			t.Fatalf("checkpoint moved back from %s to %s after the deposed leader resumed (%v)", prev.GTIDSet, cp.GTIDSet, err)
		}
		prev = cp
		if time.Since(watchUntil) > 20*time.Second {
			t.Fatalf("the deposed leader did not stop:\n%s", tailText(a.LogText(), 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitLogged(t, a, "standby: another relay holds the leader lease; waiting", 1, 20*time.Second)
	if _, dups := got.Distinct(); dups != 0 {
		t.Fatalf("%d duplicates: the deposed leader published after it resumed", dups)
	}
	// The deposed leader's own lease value is fenced out of the checkpoint.
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	defer rc.Close()
	stale := checkpoint.NewRedis(rc, key, checkpoint.WithFence(lease.TermOf(name, fmt.Sprintf("%.0f:%s", acq["token"], acq["holder"]))))
	old := before
	old.GTIDSet = "0-1-1"
	if testenv.Current.MySQL {
		old.GTIDSet = "00000000-0000-0000-0000-000000000001:1"
	}
	if err := stale.Save(context.Background(), old); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("a save with the deposed leader's token: %v, want ErrFenced", err)
	}
	if cp, _ := loadCheckpoint(t, key); cp.GTIDSet == old.GTIDSet {
		t.Fatalf("a fenced save moved the checkpoint to %s", cp.GTIDSet)
	}

	// a is a standby now: kill b and a leads again, with nothing lost.
	third := startPaced(t, db, br.Exchange, "d3", 200, 10, 10*time.Millisecond)
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= len(first)+len(second)+500 }, "delivered %d", got.Len())
	signal(t, b, syscall.SIGKILL)
	waitLogged(t, a, "leader lease acquired", 2, 3*haTTL)
	all := append(append(first, second...), third.wait(t)...)
	waitAllDistinct(t, got, all, 60*time.Second)
	assertSameOrder(t, firstSeenOrder(got.All()), all)
	if tok := logged(a, "leader lease acquired")[1]["token"].(float64); tok <= acq["token"].(float64) {
		t.Fatalf("the new term's token %v is not above the old %v", tok, acq["token"])
	}
}

// replica2 is the stack's second replica; only these tests stop it.
func stack(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(testenv.RepoPath("scripts/stack.sh"), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("stack.sh %v: %v\n%s", args, err, out)
	}
}

// binlogClientOn reports whether a binlog client with this server id is
// registered on a server (SHOW SLAVE HOSTS, SHOW REPLICAS on MySQL).
func binlogClientOn(t *testing.T, dsn string, serverID uint32) bool {
	t.Helper()
	db := testenv.Open(t, dsn, "")
	for _, id := range testenv.FirstColumn(t, db, testenv.Current.ReplicaHostsSQL()) {
		if id == fmt.Sprint(serverID) {
			return true
		}
	}
	return false
}

// Test 3: failover from replica A to replica B mid-stream: every row
// arrives, in order, and none twice (the reader resumes by GTID from the
// last whole transaction it read).
func TestFailoverToSecondReplica(t *testing.T) {
	testenv.Integration(t)
	t.Cleanup(func() { stack(t, "start", "replica2") })
	db := testenv.NewDB(t, "schema/producer_message.sql")
	db.WaitReplicatedOn(t, testenv.Replica2DSN, 5*time.Minute)
	br, got := testenv.NewCollectedBroker(t)
	r2h, r2p := testenv.HostPort(testenv.Replica2DSN)
	r1h, r1p := testenv.HostPort(testenv.ReplicaDSN)
	serverID := 200000 + rand.Uint32N(1<<20)
	source := fmt.Sprintf("{hosts: [\"%s:%d\", \"%s:%d\"], user: root, server_id: %d}", r2h, r2p, r1h, r1p, serverID)
	p := relaytest.StartProcess(t, relaytest.WriteConfig(t, relayYAML(testenv.UniqueName("failover"), db.Name, source, "")))
	p.WaitStarted(t)
	testenv.Eventually(t, 10*time.Second, func() bool { return binlogClientOn(t, testenv.Replica2DSN, serverID) },
		"the relay does not stream from replica2 (the first in source.hosts)")

	prod := startPaced(t, db, br.Exchange, "fo", 600, 10, 10*time.Millisecond) // 6 s at 1000 rows/s
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= 1500 }, "only %d delivered", got.Len())
	stack(t, "stop", "replica2")
	waitLogged(t, p, "binlog source failed over", 1, 30*time.Second)
	want := prod.wait(t)
	waitAllDistinct(t, got, want, 60*time.Second)
	distinct, dups := got.Distinct()
	t.Logf("failed over from replica2 to replica after %d deliveries; %d distinct of %d, %d duplicates", 1500, distinct, len(want), dups)
	if dups != 0 {
		t.Fatalf("%d duplicates after a failover", dups)
	}
	assertSameOrder(t, firstSeenOrder(got.All()), want)
	if !binlogClientOn(t, testenv.ReplicaDSN, serverID) {
		t.Fatal("the relay does not stream from replica after the failover")
	}
}

// A replica behind the relay's position is waited for, not read from.
func TestFailoverWaitsForLaggingReplica(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	px := testenv.Proxy(t, testenv.Addr(testenv.ReplicaDSN))
	r2 := testenv.Open(t, testenv.Replica2DSN, "")
	t.Cleanup(func() { _, _ = r2.Exec(testenv.StartReplicaSQL) })
	r2h, r2p := testenv.HostPort(testenv.Replica2DSN)
	source := fmt.Sprintf("{hosts: [\"%s\", \"%s:%d\"], user: root}", px.Addr(), r2h, r2p)
	p := relaytest.StartProcess(t, relaytest.WriteConfig(t, relayYAML(testenv.UniqueName("lag"), db.Name, source, "")))
	p.WaitStarted(t)

	first := startProducer(t, db, br.Exchange, "l1", 50, 20).wait(t)
	waitAllDistinct(t, got, first, 30*time.Second)
	// replica2 stops replicating; the relay reads a second batch from
	// replica, then loses it: its position is now ahead of replica2.
	if _, err := r2.Exec(testenv.StopReplicaSQL); err != nil {
		t.Fatal(err)
	}
	second := startProducer(t, db, br.Exchange, "l2", 25, 20).wait(t)
	waitAllDistinct(t, got, append(first, second...), 30*time.Second)
	px.Cut()
	waitLogged(t, p, "replica is behind the relay's position: waiting for it to catch up rather than reading from it", 1, 30*time.Second)
	third := startProducer(t, db, br.Exchange, "l3", 25, 20).wait(t)
	time.Sleep(2 * time.Second) // nothing to wait for: showing that nothing moves meanwhile
	if n := got.Len(); n != len(first)+len(second) {
		t.Fatalf("%d delivered while the only reachable replica lagged, want %d", n, len(first)+len(second))
	}
	if _, err := r2.Exec(testenv.StartReplicaSQL); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, p, "binlog source failed over", 1, 30*time.Second)
	all := append(append(first, second...), third...)
	waitAllDistinct(t, got, all, 30*time.Second)
	if _, dups := got.Distinct(); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
	assertSameOrder(t, firstSeenOrder(got.All()), all)
}

// Redis down: the relay publishes on for checkpoint.outage_window with the
// position in memory, then holds (without crashing) until Redis is back,
// and then saves the checkpoint and goes on.
func TestRedisOutageWindow(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, names and proxies; no server restarted (main_test.go)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	px := testenv.Proxy(t, testenv.RedisAddr)
	name := testenv.UniqueName("redisdown")
	y := relayYAML(name, db.Name, "", "")
	y = strings.Replace(y, "redis: {addr: \""+testenv.RedisAddr+"\"}", "redis: {addr: \""+px.Addr()+"\"}", 1)
	y = strings.Replace(y, "checkpoint: {interval: 200ms}", "checkpoint: {interval: 200ms, outage_window: 3s}", 1)
	p := relaytest.StartProcess(t, relaytest.WriteConfig(t, y))
	p.WaitStarted(t)

	prod := startPaced(t, db, br.Exchange, "rd", 1500, 2, 10*time.Millisecond) // 200 rows/s for 15 s
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= 400 }, "only %d delivered", got.Len())
	px.Cut()
	atCut := got.Len()
	time.Sleep(2 * time.Second) // within the window: publishing goes on
	if n := got.Len(); n <= atCut+100 {
		t.Fatalf("publishing stopped at once with Redis down: %d at the cut, %d two seconds later", atCut, n)
	}
	waitLogged(t, p, "the checkpoint could not be saved for longer than the outage window: publishing holds until it can", 1, 10*time.Second)
	// Past the window, deliveries stop (once the bounded buffers are full).
	var held int
	testenv.Eventually(t, 20*time.Second, func() bool {
		n := got.Len()
		time.Sleep(time.Second)
		held = got.Len()
		return held == n
	}, "deliveries never stopped with Redis down past the window")
	if _, err := p.Wait(100 * time.Millisecond); err == nil {
		t.Fatalf("the relay exited with Redis down:\n%s", p.LogText())
	}
	want := prod.wait(t)
	if held >= len(want) {
		t.Fatalf("everything (%d) was delivered with Redis down", held)
	}
	px.Restore()
	waitAllDistinct(t, got, want, 60*time.Second)
	waitCheckpointCovers(t, "binlog-relay:"+name+":checkpoint", primaryGTID(t, db))
	if _, dups := got.Distinct(); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
	t.Logf("Redis cut after %d deliveries; %d delivered when publishing held; all %d after it came back", atCut, held, len(want))
}

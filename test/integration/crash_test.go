package integration

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// producerState is what a background producer shares with its test: mu
// guards what it committed and err, the error that stopped it; done closes
// when it returns.
type producerState struct {
	mu   sync.Mutex
	err  error
	done chan struct{}
}

// fail records the error that stops the producer.
func (s *producerState) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// execLastGTID runs stmt (one transaction) on conn and, if withGTID, reads
// the GTID it was committed with (MariaDB's @@last_gtid, which is per
// connection).
func execLastGTID(conn *sql.Conn, stmt string, withGTID bool) (gtid string, err error) {
	ctx := context.Background()
	if testenv.Current.MySQL && withGTID {
		// MySQL has no @@last_gtid: the transaction is given its GTID, in a
		// source UUID of this test binary's own, which every server of the
		// stack then holds like any replicated GTID.
		gtid = fmt.Sprintf("%s:%d", producerUUID, producerSeq.Add(1))
		if _, err := conn.ExecContext(ctx, "SET gtid_next = '"+gtid+"'"); err != nil {
			return "", err
		}
		_, err = conn.ExecContext(ctx, stmt)
		if _, rerr := conn.ExecContext(ctx, "SET gtid_next = 'AUTOMATIC'"); err == nil {
			err = rerr
		}
		return gtid, err
	}
	if _, err := conn.ExecContext(ctx, stmt); err != nil || !withGTID {
		return "", err
	}
	err = conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&gtid)
	return gtid, err
}

// producerUUID is the source UUID execLastGTID gives transactions on MySQL,
// new for each test binary (a GTID is never used twice), with producerSeq
// numbering them.
var (
	producerUUID = fmt.Sprintf("b1e10000-0000-4000-8000-%012x", rand.Uint64()&(1<<48-1))
	producerSeq  atomic.Int64
)

// producer inserts txs transactions of perTx rows in the background.
type producer struct {
	producerState
	wg  sync.WaitGroup
	ids []string
}

func startProducer(t *testing.T, db *testenv.DB, exchange, prefix string, txs, perTx int) *producer {
	p := &producer{producerState: producerState{done: make(chan struct{})}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(p.done)
		for i := 0; i < txs; i++ {
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
	t.Cleanup(p.wg.Wait)
	return p
}

func (p *producer) wait(t *testing.T) []string {
	t.Helper()
	p.wg.Wait()
	if p.err != nil {
		t.Fatalf("producer: %v", p.err)
	}
	return p.ids
}

// firstSeenOrder returns message ids in the order they first arrived.
func firstSeenOrder(msgs []testenv.Delivery) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range msgs {
		if !seen[m.MessageID] {
			seen[m.MessageID] = true
			out = append(out, m.MessageID)
		}
	}
	return out
}

func loadCheckpoint(t *testing.T, key string) (checkpoint.Checkpoint, error) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	defer rc.Close()
	store := checkpoint.NewRedis(rc, key)
	return store.Load(context.Background())
}

// primaryGTID is the primary's binlog GTID position now.
func primaryGTID(t *testing.T, db *testenv.DB) string {
	t.Helper()
	pos, err := testenv.Current.GTIDPos(context.Background(), db.Primary)
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

func waitCheckpointCovers(t *testing.T, key, gtid string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() bool {
		cp, err := loadCheckpoint(t, key)
		if err != nil {
			return false
		}
		ok, err := binlog.ContainsGTID(cp.Flavor, cp.GTIDSet, gtid)
		return err == nil && ok
	}, "checkpoint %s never covered the last commit %s", key, gtid)
}

func assertSameOrder(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("distinct messages: %d, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("distinct message %d is %s, want %s", i, got[i], want[i])
		}
	}
}

// waitDeliveredOnceInOrder waits until every message of want arrived, then
// asserts each arrived exactly once and first deliveries are in want's
// order.
func waitDeliveredOnceInOrder(t *testing.T, got *testenv.Collector, want []string, within time.Duration) {
	t.Helper()
	waitAllDistinct(t, got, want, within)
	if distinct, dups := got.Distinct(); distinct != len(want) || dups != 0 {
		t.Fatalf("%d distinct of %d messages, %d duplicates; want all once", distinct, len(want), dups)
	}
	assertSameOrder(t, firstSeenOrder(got.All()), want)
}

// midStream is a relay process that a signal stopped while a producer's
// rows were streaming.
type midStream struct {
	db   *testenv.DB
	got  *testenv.Collector
	name string // the relay's name
	cfg  string // its config file, to start it again
	p    *relaytest.Process
	prod *producer
}

// signalMidStream starts the relay as a process and a producer of txs
// transactions of 100 rows (ids prefix-...), and sends the relay sig once
// after rows were delivered.
func signalMidStream(t *testing.T, name, prefix string, txs, after int, sig syscall.Signal) *midStream {
	t.Helper()
	m := &midStream{db: testenv.NewDB(t, "schema/producer_message.sql"), name: testenv.UniqueName(name)}
	br, got := testenv.NewCollectedBroker(t)
	m.got = got
	m.cfg = relaytest.WriteConfig(t, relaytest.RelayConfig(m.name, relaytest.SeedTable(m.db.Name), ""))
	m.p = relaytest.StartedProcess(t, m.cfg)
	m.prod = startProducer(t, m.db, br.Exchange, prefix, txs, 100)
	testenv.Eventually(t, 60*time.Second, func() bool { return got.Len() >= after }, "only %d delivered before %s", got.Len(), sig)
	signal(t, m.p, sig)
	return m
}

// Test 3: SIGKILL in the middle of 50,000 rows, then a restart: every row
// arrives (duplicates counted, none lost), first deliveries in commit order,
// and the checkpoint ends at the last commit.
func TestRelaySurvivesSIGKILL(t *testing.T) {
	testenv.Integration(t)
	testenv.LockHeavy(t)
	testenv.PurgeBinlogs(t) // a long run: leave no gigabytes of binlog behind
	m := signalMidStream(t, "kill", "k", 500, 15000, syscall.SIGKILL)
	db, got := m.db, m.got
	if _, err := m.p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	beforeKill := got.Len()
	relaytest.StartedProcess(t, m.cfg)
	want := m.prod.wait(t)
	last := primaryGTID(t, db)
	waitAllDistinct(t, got, want, 120*time.Second)
	distinct, dups := got.Distinct()
	t.Logf("killed after %d deliveries; %d distinct of %d rows, %d duplicates after the restart", beforeKill, distinct, len(want), dups)
	assertSameOrder(t, firstSeenOrder(got.All()), want)
	if dups > beforeKill {
		t.Fatalf("%d duplicates: more than was delivered before the kill (%d)", dups, beforeKill)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) },
		"statuses: %v", statusCounts(t, db.Primary))
	waitCheckpointCovers(t, "binlog-relay:"+m.name+":checkpoint", last)
}

// Test 4: SIGTERM mid-stream drains, saves the checkpoint and exits 0; the
// restart publishes nothing twice.
func TestRelaySIGTERMDrainsWithoutDuplicates(t *testing.T) {
	testenv.Integration(t)
	m := signalMidStream(t, "term", "s", 300, 8000, syscall.SIGTERM)
	db, got := m.db, m.got
	code, err := m.p.Wait(30 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit code %d, %v\n%s", code, err, m.p.LogText())
	}
	relaytest.StartedProcess(t, m.cfg)
	want := m.prod.wait(t)
	testenv.Eventually(t, 60*time.Second, func() bool { return got.Len() >= len(want) }, "delivered %d of %d", got.Len(), len(want))
	// Anything extra would have arrived with the rest: the last row's
	// SENT mark follows its delivery, so wait for all marks first.
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) },
		"statuses: %v", statusCounts(t, db.Primary))
	distinct, dups := got.Distinct()
	if dups != 0 || distinct != len(want) {
		// Which rows came twice, and where, tells a replay (a run of one
		// transaction's rows) from a republish after a broker blip.
		seen, shown := map[string]int{}, 0
		for i, d := range got.All() {
			if j, ok := seen[d.MessageID]; ok && shown < 5 {
				t.Logf("duplicate %s: delivery %d and %d", d.MessageID, j, i)
				shown++
			} else if !ok {
				seen[d.MessageID] = i
			}
		}
		t.Fatalf("after SIGTERM and restart: %d distinct, %d duplicates; want %d and 0", distinct, dups, len(want))
	}
	assertSameOrder(t, firstSeenOrder(got.All()), want)
}

// Test 6: binlog rotation while streaming loses nothing.
func TestRelayFollowsBinlogRotation(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("rotate"), relaytest.SeedTable(db.Name), ""))
	prod := startProducer(t, db, br.Exchange, "r", 200, 50)
	for i := 0; i < 5; i++ {
		// Rotate on the replica (the relay's source) and on the primary.
		if _, err := db.Replica.Exec("FLUSH BINARY LOGS"); err != nil {
			t.Fatal(err)
		}
		db.Exec(t, "FLUSH BINARY LOGS")
		time.Sleep(100 * time.Millisecond) // spread the rotations over the run; not a wait for a result
	}
	waitDeliveredOnceInOrder(t, got, prod.wait(t), 60*time.Second)
}

// Test 7: one 100,000-row transaction goes through with the relay's peak
// RSS under 256 MB.
func TestRelayLargeTransactionMemory(t *testing.T) {
	testenv.Integration(t)
	testenv.LockHeavy(t)
	testenv.PurgeBinlogs(t) // a long run: leave no gigabytes of binlog behind
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	cfg := relaytest.WriteConfig(t, relaytest.RelayConfig(testenv.UniqueName("bigtx"), relaytest.SeedTable(db.Name), ""))
	p := relaytest.StartedProcess(t, cfg)

	const rows = 100000
	tx, err := db.Primary.Begin()
	if err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 200)
	for i := 0; i < rows; i += 1000 {
		stmt := outboxInsert(i, i+1000, func(j int) string {
			return fmt.Sprintf("('big-%06d', '%s', 'order.created', '{\"n\":%d,\"pad\":\"%s\"}')", j, br.Exchange, j, payload)
		})
		if _, err := tx.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testenv.Eventually(t, 180*time.Second, func() bool { return got.Len() >= rows }, "delivered %d of %d", got.Len(), rows)
	elapsed := time.Since(start)
	peak := peakRSS(t, p.Cmd.Process.Pid)
	t.Logf("100,000-row transaction relayed in %s; relay peak RSS %d MB", elapsed.Round(time.Millisecond), peak>>20)
	if peak > 256<<20 {
		t.Fatalf("relay peak RSS %d MB, want under 256 MB", peak>>20)
	}
	if d, dups := got.Distinct(); d != rows || dups != 0 {
		t.Fatalf("%d distinct, %d duplicates", d, dups)
	}
}

// peakRSS reads VmHWM (peak resident set) of a process in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

package chaos

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

var (
	duration = flag.Duration("chaos.duration", 60*time.Second, "how long the producer writes while faults are injected (make chaos: 5m)")
	rate     = flag.Int("chaos.rate", 500, "outbox rows per second")
	real     = flag.Bool("chaos.real-restarts", false, "really restart RabbitMQ (rabbitmqctl stop_app/start_app) instead of cutting the relays' connections to it: only where nothing else uses the broker. Redis is the suite's own and always really restarted")
	leaseTTL = flag.Duration("chaos.lease-ttl", 3*time.Second, "the relays' ha.lease_ttl")
)

// TestChaos runs the producer, two relays (leader and standby) and an inbox
// consumer while the schedule injects faults, then checks that every
// committed row was delivered or is FAILED with a reason, and prints the
// summary.
func TestChaos(t *testing.T) {
	testenv.Integration(t)
	testenv.LockHeavy(t)
	testenv.PurgeBinlogs(t) // a long run: leave no gigabytes of binlog behind
	realRestarts := *real
	db := testenv.NewDB(t, "schema/producer_message.sql", "schema/consumer_message.sql")
	db.Exec(t, "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(32) NOT NULL UNIQUE, amount INT NOT NULL)")
	db.WaitReplicated(t, 30*time.Second)
	// replica2 is the relays' first source; it may still be catching up on
	// what ran before (make bench pauses it).
	db.WaitReplicatedOn(t, testenv.Replica2DSN, 5*time.Minute)
	br := testenv.NewBroker(t)
	store := startRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: store.addr})
	t.Cleanup(func() { _ = rc.Close() })

	f := &fleet{t: t, name: testenv.UniqueName("chaos"), rc: rc, store: store, real: realRestarts,
		cut: min(max(*duration/12, 3*time.Second), 20*time.Second)}
	amqpURL, err := url.Parse(testenv.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	f.broker = testenv.Proxy(t, amqpURL.Host)
	amqpURL.Host = f.broker.Addr()
	f.brokerURL = amqpURL.String()
	f.redis = testenv.Proxy(t, store.addr)
	f.replicas[0] = testenv.Proxy(t, testenv.Addr(testenv.Replica2DSN))
	f.replicas[1] = testenv.Proxy(t, testenv.Addr(testenv.ReplicaDSN))
	for i := range f.cfgs {
		f.ids[i] = 300000 + rand.Uint32N(1<<20)
		f.cfgs[i] = relaytest.WriteConfig(t, relayConfig(f, db.Name, f.ids[i]))
	}

	// The consumer, through the inbox, as a service would run it.
	counts := &tally{}
	relaytest.StartInbox(t, inbox.Config{URL: testenv.AMQPURL, Queue: br.Queue, ConsumerName: f.name,
		DisableRetryTask: true, DisableRetention: true, ReconnectDelay: 200 * time.Millisecond, ReconnectMaxDelay: 2 * time.Second},
		db.Primary, func(context.Context, *sql.Tx, inbox.Message) error { return nil }, zap.NewNop(), inbox.WithMetrics(counts))

	f.run(0)
	f.waitLeader(-1, 60*time.Second)
	f.run(1)
	f.start = time.Now()
	counts.mu.Lock()
	counts.started = f.start
	counts.mu.Unlock()
	restarts := "RabbitMQ restart simulated by a proxy cut, Redis really restarted"
	if realRestarts {
		restarts = "RabbitMQ and Redis really restarted"
	}
	f.note("producer starts: %d rows/s for %s; %s; cuts last %s", *rate, *duration, restarts, f.cut)
	prod := startProducer(db.Primary, br.Exchange, *rate, 10)

	events := schedule()
	for i, ev := range events {
		at := *duration * time.Duration(i+1) / time.Duration(len(events)+2)
		if wait := time.Until(f.start.Add(at)); wait > 0 {
			time.Sleep(wait) // the schedule: faults at fixed offsets into the run
		}
		ev.do(f)
	}
	if wait := time.Until(f.start.Add(*duration)); wait > 0 {
		time.Sleep(wait)
	}
	prod.halt()
	f.note("producer stopped: %d rows committed (%d failed statements)", prod.committed.Load(), prod.errors.Load())

	committed := count(t, db, "SELECT COUNT(*) FROM producer_message")
	lostQuery := fmt.Sprintf(`SELECT COUNT(*) FROM producer_message p
		LEFT JOIN consumer_message c ON c.consumer = '%s' AND c.message_id = p.message_id
		WHERE c.id IS NULL AND p.status <> 'FAILED'`, f.name)
	drain := 90*time.Second + *duration/4
	deadline := time.Now().Add(drain)
	lost := count(t, db, lostQuery)
	for lost > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second) // polling the database until the rest arrives
		lost = count(t, db, lostQuery)
	}
	f.note("drained (%d not delivered)", lost)
	distinct := count(t, db, fmt.Sprintf("SELECT COUNT(*) FROM consumer_message WHERE consumer = '%s' AND status = 'SUCCESS'", f.name))
	processed, dups, failed, burst, burstAt, stall, stallAt := counts.snapshot()
	failedRows := failedRows(t, db)
	nFailed := count(t, db, "SELECT COUNT(*) FROM producer_message WHERE status = 'FAILED'")
	if orders := count(t, db, "SELECT COUNT(*) FROM orders"); orders != committed {
		t.Errorf("%d orders but %d outbox rows: the transactions were not atomic", orders, committed)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\nchaos summary: %s at %d rows/s, %s, lease TTL %s\n", *duration, *rate, restarts, *leaseTTL)
	fmt.Fprintf(&b, "  rows committed       %d\n", committed)
	fmt.Fprintf(&b, "  messages delivered   %d\n", processed+dups+failed)
	fmt.Fprintf(&b, "  distinct delivered   %d\n", distinct)
	fmt.Fprintf(&b, "  lost                 %d\n", lost)
	fmt.Fprintf(&b, "  duplicates           %d (largest burst %d, from %.1fs into the run)\n", dups, burst, burstAt.Sub(f.start).Seconds())
	fmt.Fprintf(&b, "  FAILED rows          %d\n", nFailed)
	for _, r := range failedRows {
		fmt.Fprintf(&b, "    %s\n", r)
	}
	fmt.Fprintf(&b, "  longest stall        %s (from %.1fs into the run)\n", stall.Round(100*time.Millisecond), stallAt.Sub(f.start).Seconds())
	b.WriteString("  events:\n")
	for _, j := range f.journal {
		fmt.Fprintf(&b, "    %s\n", j)
	}
	fmt.Print(b.String())
	if lost != 0 {
		t.Fatalf("%d committed rows were neither delivered nor FAILED", lost)
	}
}

// relayConfig is one relay of the pair: HA on, every server behind a proxy,
// both replicas in source.hosts (replica2 first).
func relayConfig(f *fleet, dbName string, serverID uint32) string {
	return relaytest.Config{Name: f.name, Tables: relaytest.SeedTable(dbName), Sections: map[string]string{
		"source": fmt.Sprintf(`{hosts: ["%s", "%s"], user: root, server_id: %d}`, f.replicas[0].Addr(), f.replicas[1].Addr(), serverID),
		"broker": fmt.Sprintf(`{url: "%s"}`, f.brokerURL),
		"redis":  fmt.Sprintf(`{addr: "%s"}`, f.redis.Addr()),
		"ha":     fmt.Sprintf("{enabled: true, lease_ttl: %s}", *leaseTTL),
		"http":   `{addr: "off"}`,
		// The shipped checkpoint and flush intervals: chaos runs as in production.
		"checkpoint": "",
		"relay":      "",
	}}.YAML()
}

package orderinventory_test

import (
	"context"
	"database/sql"
	"fmt"
	mathrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/binlog-relay/binlog-relay/examples/order-inventory/inventory"
	"github.com/binlog-relay/binlog-relay/examples/order-inventory/order"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

const (
	totalOrders = 10000
	skuCount    = 50
	stockPerSKU = 1000000
)

// Test 7: 10,000 orders end to end. The order service writes orders with their outbox
// rows; binlog-relay publishes them (at least once: it is SIGKILLed and restarted once,
// replaying what came after its last checkpoint); the inventory service deducts stock
// through the inbox, and is restarted twice (and has its broker connection cut once)
// while messages flow. At the end every order was deducted exactly once.
func TestEndToEndTenThousandOrders(t *testing.T) {
	testenv.Integration(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("E2E_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("order mix seed %d (set E2E_SEED to repeat)", seed)

	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	relay := startRelay(t, e)

	// The inventory service, restartable. All generations share the counters.
	counters := &inbox.Counters{}
	var killer testenv.ConnKiller
	cfg := inbox.Config{
		URL: testenv.AMQPURL, Queue: e.queue, ConsumerName: "inventory-service",
		Workers: 8, ReconnectDelay: 50 * time.Millisecond, RequeueDelay: 50 * time.Millisecond,
		RetryInterval: 100 * time.Millisecond, RetryBackoff: 50 * time.Millisecond,
		RetryMaxBackoff: time.Second, DisableRetention: true,
	}
	start := func() (stop func()) {
		c := relaytest.StartInbox(t, cfg, e.db, inventory.Deduct, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
			inbox.WithMetrics(counters), inbox.WithDialer(killer.Dial))
		var once sync.Once
		return func() {
			once.Do(func() {
				if err := c.Stop(); err != nil {
					t.Errorf("inventory consumer Run: %v", err)
				}
			})
		}
	}
	stop := start()
	defer func() { stop() }()

	// The order service: 10,000 orders from 8 concurrent clients.
	placeErr := make(chan error, 1)
	began := time.Now()
	go func() {
		err := placeOrders(ctx, e.db, e.exchange, seed)
		t.Logf("placed %d orders in %s", totalOrders, time.Since(began).Round(time.Millisecond))
		placeErr <- err
	}()

	success := func() int {
		return e.count(`SELECT COUNT(*) FROM consumer_message WHERE status = 'SUCCESS'`)
	}
	var disruptions []string
	at := func(threshold int, what string, do func()) {
		// Generous deadlines: the machine may be shared with other test runs.
		testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d orders deducted before %s", threshold, what), func() (bool, string) {
			n := success()
			return n >= threshold, fmt.Sprintf("%d deducted, %+v", n, counters.Snapshot())
		})
		do()
		disruptions = append(disruptions, fmt.Sprintf("%s at %d deducted", what, success()))
	}
	at(2500, "restart 1", func() { stop(); stop = start() })
	at(5000, "broker connection cut", killer.KillAll)
	at(6000, "relay SIGKILL and restart", relay.kill)
	at(7500, "restart 2", func() { stop(); stop = start() })

	if err := <-placeErr; err != nil {
		t.Fatalf("placing orders: %v", err)
	}
	testenv.WaitFor(t, 3*time.Minute, "every order deducted and every published copy consumed", func() (bool, string) {
		n, s := success(), counters.Snapshot()
		sent := e.count(`SELECT COUNT(*) FROM producer_message WHERE status = 'SENT'`)
		return n == totalOrders && sent == totalOrders && e.queueDepth() == 0,
			fmt.Sprintf("%d deducted, %d sent, %+v", n, sent, s)
	})
	stop()
	t.Logf("all %d orders deducted %s after the first order", totalOrders, time.Since(began).Round(time.Millisecond))
	t.Logf("disruptions: %s", strings.Join(disruptions, "; "))
	for _, d := range disruptions {
		var n int
		_, _ = fmt.Sscanf(d[strings.LastIndex(d, " at ")+4:], "%d", &n)
		if n >= totalOrders {
			t.Errorf("%s: not during the run", d)
		}
	}

	r, err := inventory.Verify(context.Background(), e.db)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !r.Consistent() || r.Orders != totalOrders {
		t.Errorf("books do not balance: %+v", r)
	}
	if n := e.count(`SELECT COUNT(*) FROM consumer_message`); n != totalOrders {
		t.Errorf("%d inbox rows, want %d (all SUCCESS)", n, totalOrders)
	}
	s := counters.Snapshot()
	if s.Processed != totalOrders || s.Failed != 0 || s.Retries != 0 {
		t.Errorf("outcomes %+v, want %d processed and no failures", s, totalOrders)
	}
	if killer.Dials() < 4 {
		t.Errorf("the consumers dialled %d times, want at least 4 (3 generations + a reconnect)", killer.Dials())
	}
	if d := e.queueDepth(); d != 0 {
		t.Errorf("queue holds %d messages after the run", d)
	}
	t.Logf("outcomes %+v (duplicates: the relay's replay after its SIGKILL and the broker cut)", s)
}

// placeOrders places totalOrders random orders through the order service.
func placeOrders(ctx context.Context, db *sql.DB, exchange string, seed uint64) error {
	svc := order.New(db, exchange)
	rng := mathrand.New(mathrand.NewPCG(seed, seed))
	type line struct {
		sku string
		qty int
	}
	lines := make(chan line)
	go func() {
		defer close(lines)
		for i := 0; i < totalOrders; i++ {
			l := line{fmt.Sprintf("sku-%03d", rng.IntN(skuCount)), 1 + rng.IntN(5)}
			select {
			case lines <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range lines {
				if _, _, err := svc.Place(ctx, l.sku, l.qty); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// relayHandle is binlog-relay running as a child process on the test's
// database; kill SIGKILLs it and starts a new one, which resumes from the
// saved checkpoint and republishes what came after it (real duplicates for
// the inbox to absorb).
type relayHandle struct {
	t   *testing.T
	cfg string
	p   *relaytest.Process
}

// startRelay starts the relay on e's database once the replica has its
// tables.
func startRelay(t *testing.T, e *env) *relayHandle {
	e.d.WaitReplicated(t, 30*time.Second)
	h := &relayHandle{t: t, cfg: relaytest.WriteConfig(t, relaytest.RelayConfig(testenv.UniqueName("orderinv_relay"),
		relaytest.SeedTable(e.d.Name), ""))}
	h.start()
	return h
}

func (h *relayHandle) start() {
	h.p = relaytest.StartedProcess(h.t, h.cfg)
}

func (h *relayHandle) kill() {
	_ = h.p.Cmd.Process.Kill()
	if _, err := h.p.Wait(10 * time.Second); err != nil {
		h.t.Fatal(err)
	}
	h.start()
}

// --- test environment -------------------------------------------------------------

type env struct {
	t        *testing.T
	d        *testenv.DB
	db       *sql.DB // d.Primary
	ch       *amqp.Channel
	exchange string
	queue    string
}

// newEnv creates a database with the outbox, inbox and business schemas and stocked
// SKUs, and a uniquely named exchange and queue; all are dropped at the end.
func newEnv(t *testing.T) *env {
	e := &env{t: t, d: testenv.NewDB(t, "schema/producer_message.sql", "schema/consumer_message.sql",
		"examples/order-inventory/schema.sql")}
	e.db = e.d.Primary
	e.db.SetMaxOpenConns(40)
	e.db.SetMaxIdleConns(40)
	skus := make([]string, skuCount)
	for i := range skus {
		skus[i] = fmt.Sprintf("sku-%03d", i)
	}
	if err := inventory.Seed(context.Background(), e.db, skus, stockPerSKU); err != nil {
		t.Fatal(err)
	}

	_, e.ch = testenv.Dial(t)
	e.exchange, e.queue = testenv.UniqueName("orderinv_test_x"), testenv.UniqueName("orderinv_test_q")
	if err := inventory.DeclareTopology(e.ch, e.exchange, e.queue); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.ch.QueueDelete(e.queue, false, false, false)
		_ = e.ch.ExchangeDelete(e.exchange, false, false)
	})
	return e
}

func (e *env) count(query string) int {
	e.t.Helper()
	return e.d.Count(e.t, query)
}

func (e *env) queueDepth() int {
	e.t.Helper()
	return testenv.QueueDepth(e.t, e.ch, e.queue)
}

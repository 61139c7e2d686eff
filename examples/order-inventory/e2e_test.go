package orderinventory_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
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
	if testing.Short() {
		t.Skip("integration test (MariaDB/MySQL and RabbitMQ); skipped with -short")
	}
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
	var killer connKiller
	cfg := inbox.Config{
		URL: amqpURL(), Queue: e.queue, ConsumerName: "inventory-service",
		Workers: 8, ReconnectDelay: 50 * time.Millisecond, RequeueDelay: 50 * time.Millisecond,
		RetryInterval: 100 * time.Millisecond, RetryBackoff: 50 * time.Millisecond,
		RetryMaxBackoff: time.Second, DisableRetention: true,
	}
	start := func() (stop func()) {
		c, err := inbox.New(cfg, e.db, inventory.Deduct, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
			inbox.WithMetrics(counters), inbox.WithDialer(killer.dial))
		if err != nil {
			t.Fatalf("inbox.New: %v", err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		var once sync.Once
		return func() {
			once.Do(func() {
				ccancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("inventory consumer Run: %v", err)
					}
				case <-time.After(30 * time.Second):
					t.Errorf("inventory consumer did not stop")
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
		waitFor(t, 2*time.Minute, fmt.Sprintf("%d orders deducted before %s", threshold, what), func() (bool, string) {
			n := success()
			return n >= threshold, fmt.Sprintf("%d deducted, %+v", n, counters.Snapshot())
		})
		do()
		disruptions = append(disruptions, fmt.Sprintf("%s at %d deducted", what, success()))
	}
	at(2500, "restart 1", func() { stop(); stop = start() })
	at(5000, "broker connection cut", killer.killAll)
	at(6000, "relay SIGKILL and restart", relay.kill)
	at(7500, "restart 2", func() { stop(); stop = start() })

	if err := <-placeErr; err != nil {
		t.Fatalf("placing orders: %v", err)
	}
	waitFor(t, 3*time.Minute, "every order deducted and every published copy consumed", func() (bool, string) {
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
	if killer.dialCount() < 4 {
		t.Errorf("the consumers dialled %d times, want at least 4 (3 generations + a reconnect)", killer.dialCount())
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
	replica := testenv.Open(t, testenv.ReplicaDSN, "")
	var pos string
	if err := e.db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	var res sql.NullInt64
	if err := replica.QueryRow("SELECT MASTER_GTID_WAIT(?, 30)", pos).Scan(&res); err != nil || res.Int64 != 0 {
		t.Fatalf("replica did not catch up with the schema: %v %v", err, res)
	}
	h := &relayHandle{t: t, cfg: relaytest.WriteConfig(t, relaytest.RelayConfig(randName("orderinv_relay_"),
		fmt.Sprintf("  - {preset: producer-message, schema: %s}\n", e.name), ""))}
	h.start()
	return h
}

func (h *relayHandle) start() {
	h.p = relaytest.StartProcess(h.t, h.cfg)
	testenv.Eventually(h.t, 30*time.Second, func() bool {
		l := h.p.LogText()
		return strings.Contains(l, "binlog stream connected") && strings.Contains(l, "broker connected")
	}, "relay did not start:\n%s", h.p.LogText())
}

func (h *relayHandle) kill() {
	_ = h.p.Cmd.Process.Kill()
	if _, err := h.p.Wait(10 * time.Second); err != nil {
		h.t.Fatal(err)
	}
	h.start()
}

// --- test environment -------------------------------------------------------------

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func amqpURL() string { return envOr("RELAY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/") }

func randName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

type env struct {
	t        *testing.T
	name     string
	db       *sql.DB
	ch       *amqp.Channel
	exchange string
	queue    string
}

// newEnv creates a database with the outbox, inbox and business schemas and stocked
// SKUs, and a uniquely named exchange and queue; all are dropped at the end.
func newEnv(t *testing.T) *env {
	e := &env{t: t}
	cfg, err := mysql.ParseDSN(envOr("RELAY_TEST_PRIMARY_DSN", "root@tcp(127.0.0.1:3307)/"))
	if err != nil {
		t.Fatalf("RELAY_TEST_PRIMARY_DSN does not parse: %v", err)
	}
	cfg.MultiStatements = true
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("opening MariaDB/MySQL at %s: %v", cfg.Addr, err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	if err := admin.PingContext(pctx); err != nil {
		t.Fatalf("MariaDB/MySQL unreachable at %s (set RELAY_TEST_PRIMARY_DSN): %v", cfg.Addr, err)
	}
	name := randName("orderinv_test_")
	e.name = name
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("creating database: %v", err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name) })
	cfg.DBName, cfg.ParseTime, cfg.InterpolateParams = name, true, true
	e.db, err = sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("opening test database: %v", err)
	}
	e.db.SetMaxOpenConns(40)
	e.db.SetMaxIdleConns(40)
	t.Cleanup(func() { _ = e.db.Close() })
	for _, f := range []string{"../../schema/producer_message.sql", "../../schema/consumer_message.sql", "schema.sql"} {
		ddl, err := os.ReadFile(filepath.FromSlash(f))
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		if _, err := e.db.Exec(string(ddl)); err != nil {
			t.Fatalf("applying %s: %v", f, err)
		}
	}
	skus := make([]string, skuCount)
	for i := range skus {
		skus[i] = fmt.Sprintf("sku-%03d", i)
	}
	if err := inventory.Seed(context.Background(), e.db, skus, stockPerSKU); err != nil {
		t.Fatal(err)
	}

	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Fatalf("RabbitMQ unreachable (set RELAY_TEST_AMQP_URL): %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if e.ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	e.exchange, e.queue = randName("orderinv_test_x_"), randName("orderinv_test_q_")
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
	var n int
	if err := e.db.QueryRow(query).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (e *env) queueDepth() int {
	e.t.Helper()
	q, err := e.ch.QueueDeclarePassive(e.queue, true, false, false, false, nil)
	if err != nil {
		e.t.Fatalf("inspecting queue: %v", err)
	}
	return q.Messages
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connKiller dials the broker and can cut every connection it made, as a broker crash
// would.
type connKiller struct {
	mu    sync.Mutex
	conns []net.Conn
	dials int
}

func (k *connKiller) dial(network, addr string) (net.Conn, error) {
	c, err := amqp.DefaultDial(5*time.Second)(network, addr)
	if err == nil {
		k.mu.Lock()
		k.conns, k.dials = append(k.conns, c), k.dials+1
		k.mu.Unlock()
	}
	return c, err
}

func (k *connKiller) killAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

func (k *connKiller) dialCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dials
}

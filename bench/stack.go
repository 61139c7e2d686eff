package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// env is one bench run's servers and the things it created.
type env struct {
	o        *options
	dbName   string
	primary  *countedDB // the bench's own statements, counted
	producer *countedDB // the fixed-rate producer's pool, counted the same way
	ownStmts stmtCount  // what the bench sent the primary (all its connections)
	wire     *wireProxy // contenders reach the primary through it
	created  bool
	replica  *sql.DB
	extras   pausedReplicas
	redis    *redis.Client

	topo     topology // the run's exchange and queues
	consumer *consumer

	relayBin   string
	tmp        string
	relayNames []string
	primaryPID int
	phase      int
	watermark  int64 // highest id of the seeded SENT rows: everything above is removed after each run
	seeded     int   // SENT rows in the table
	brokerRate float64
	// relaySection, when set, is the relay: section of the relay's config
	// (the lanes step's lanes and ordering).
	relaySection string
	// relayHTTP, when set, is the relay's http.addr (the kill step reads
	// its metrics); otherwise the relay serves none.
	relayHTTP string
	// tableOverride, when set, is the relay's tables: entry instead of
	// -relay-table in the run's database (the tenants step's pattern);
	// startWithin, when set, how long a relay may take to start (30 s).
	tableOverride string
	startWithin   time.Duration
	procs         []proc    // local processes of the stack, for CPU use
	stack         stackInfo // what the run runs on, for the report's header
}

// openDB opens a DSN with the bench's options: client-side interpolation, so
// every statement is one round trip, as the relay's own connections do.
func openDB(dsn, db string, params map[string]string) (*sql.DB, error) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing DSN: %w", err)
	}
	c.DBName = db
	c.ParseTime = true
	c.InterpolateParams = true
	c.Params = params
	conn, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := conn.PingContext(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("MySQL at %s is not reachable (scripts/stack.sh up): %w", c.Addr, err)
	}
	return conn, nil
}

// newEnv opens the run's servers and creates what it uses (the database
// and its seed table, the exchange and queues, the relay binary); on an
// error it removes what it created.
func newEnv(ctx context.Context, o *options) (e *env, err error) {
	// The driver logs a connection the server closed while idle (a server
	// of the shared stack restarted by another test) and then retries on a
	// new one: not the bench's concern.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	suffix := fmt.Sprintf("%d_%04d", time.Now().Unix()%1000000, rand.IntN(10000))
	e = &env{o: o, dbName: "bench_" + suffix, topo: topology{amqpURL: o.amqpURL, exchange: "bench.ex." + suffix, queue: "bench.q." + suffix}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.tmp, err = os.MkdirTemp("", "binlog-relay-bench"); err != nil {
		return nil, err
	}
	if err := e.createDatabase(ctx); err != nil {
		return nil, err
	}
	if err := e.openReplicas(ctx); err != nil {
		return nil, err
	}
	e.redis = redis.NewClient(&redis.Options{Addr: o.redisAddr})
	if err := e.redis.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w", o.redisAddr, err)
	}
	e.primaryPID = serverPID(ctx, e.primary)
	if ph, pp, _, _, err := hostPort(o.primaryDSN); err != nil {
		return nil, err
	} else if e.wire, err = startWireProxy(net.JoinHostPort(ph, strconv.Itoa(pp))); err != nil {
		return nil, err
	}
	e.procs = e.stackProcs(ctx)
	if err := e.setupBroker(); err != nil {
		return nil, err
	}
	if e.relayBin, err = buildRelay(e.tmp, o.relayBin); err != nil {
		return nil, err
	}
	if err := e.quiesce(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// createDatabase reads the primary's version, creates the run's database
// on it, opens the bench's counted pool on that database and creates the
// seed table there.
func (e *env) createDatabase(ctx context.Context) error {
	root, err := openDB(e.o.primaryDSN, "", nil)
	if err != nil {
		return fmt.Errorf("primary: %w", err)
	}
	e.stack.flavor = testenv.Current.Name
	if e.stack.primary, err = serverVersion(ctx, root, "-primary-dsn"); err != nil {
		_ = root.Close()
		return err
	}
	e.ownStmts.note("SELECT VERSION()")
	e.ownStmts.note("CREATE DATABASE")
	_, err = root.ExecContext(ctx, "CREATE DATABASE "+e.dbName)
	_ = root.Close()
	if err != nil {
		return fmt.Errorf("creating database: %w", err)
	}
	e.created = true
	if e.primary, err = e.openPrimary(4); err != nil {
		return err
	}
	ddl, err := os.ReadFile(filepath.Join(repoRoot(), "schema", "producer_message.sql"))
	if err != nil {
		return fmt.Errorf("reading the seed schema: %w", err)
	}
	if _, err := e.primary.ExecContext(ctx, stripComments(string(ddl))); err != nil {
		return fmt.Errorf("creating producer_message: %w", err)
	}
	return nil
}

// openReplicas opens the replica the relay reads, reads its version, and
// pauses the extra replicas.
func (e *env) openReplicas(ctx context.Context) (err error) {
	if e.replica, err = openDB(e.o.replicaDSN, "", nil); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	if e.stack.replica, err = serverVersion(ctx, e.replica, "-replica-dsn"); err != nil {
		return err
	}
	e.extras = pauseReplicas(ctx, e.o.extraReplicas)
	return nil
}

// close drops what the run created.
func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if e.consumer != nil {
		e.consumer.close()
	}
	if !e.o.keep {
		e.topo.remove()
		if e.primary != nil && e.created {
			if _, err := e.primary.ExecContext(ctx, "DROP DATABASE IF EXISTS "+e.dbName); err != nil {
				progress("dropping %s: %v", e.dbName, err)
			}
		}
	}
	if e.redis != nil {
		// The relay's keys are binlog-relay:<name>:* (checkpoint, leader
		// lease); every name here is the bench's own.
		for _, n := range e.relayNames {
			iter := e.redis.Scan(ctx, 0, "binlog-relay:"+n+":*", 100).Iterator()
			for iter.Next(ctx) {
				_ = e.redis.Del(ctx, iter.Val()).Err()
			}
		}
		_ = e.redis.Close()
	}
	// Purge first: it lets the paused replicas catch up and pauses them
	// again, so they are resumed only after it.
	if e.created {
		e.purgeBinlogs()
	}
	e.resumeExtras()
	for _, db := range append([]*sql.DB{e.replica}, e.extras...) {
		if db != nil {
			_ = db.Close()
		}
	}
	if e.producer != nil {
		_ = e.producer.Close()
	}
	if e.primary != nil {
		_ = e.primary.Close()
	}
	if e.wire != nil {
		_ = e.wire.close()
	}
	if e.tmp != "" {
		_ = os.RemoveAll(e.tmp)
	}
}

// contenderDSN is the primary DSN by way of the counting proxy.
func (e *env) contenderDSN() string {
	c, err := mysql.ParseDSN(e.o.primaryDSN)
	if err != nil {
		return e.o.primaryDSN
	}
	c.Addr = e.wire.addr()
	return c.FormatDSN()
}

// buildRelay returns the relay binary, building it into dir when none is
// given.
func buildRelay(dir, given string) (string, error) {
	if given != "" {
		return given, nil
	}
	out := filepath.Join(dir, "binlog-relay")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/binlog-relay")
	cmd.Dir = repoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the relay: %v\n%s", err, b)
	}
	return out, nil
}

// repoRoot is the directory holding go.mod, from the working directory up.
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir
		}
		d = parent
	}
}

func stripComments(sql string) string {
	var out []string
	for _, l := range strings.Split(sql, "\n") {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func redactDSN(dsn string) string {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "<dsn>"
	}
	return c.User + "@" + c.Addr
}

func hostPort(dsn string) (host string, port int, user, pass string, err error) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", 0, "", "", err
	}
	h, p, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return "", 0, "", "", fmt.Errorf("DSN address %q: %w", c.Addr, err)
	}
	port, err = strconv.Atoi(p)
	return h, port, c.User, c.Passwd, err
}

// quiesce waits until every replica has applied what the primary logged and
// InnoDB's purge has caught up, so the next measurement does not share the
// machine with catch-up work from the previous step.
func (e *env) quiesce(ctx context.Context) error {
	pos, err := e.primaryPos(ctx)
	if err != nil {
		return err
	}
	if err := waitApplied(ctx, e.replica, pos, 300*time.Second); err != nil {
		return fmt.Errorf("the replica did not reach %s: %w", pos, err)
	}
	e.extras.catchUp(ctx, pos, 300*time.Second)
	deadline := time.Now().Add(60 * time.Second)
	for _, db := range []rowQuerier{e.primary, e.replica} {
		for {
			var n int64
			err := db.QueryRowContext(ctx, "SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'").Scan(&n)
			if err != nil || n < 5000 {
				break
			}
			if time.Now().After(deadline) {
				progress("InnoDB purge still behind after 60s; going on")
				break
			}
			if err := sleep(ctx, 250*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return waitMachineIdle(ctx, 30*time.Second)
}

// waitMachineIdle waits (up to max) for a second in which the machine's
// cores are at most 15% busy: what a previous step left running (a
// server's background flushing, the broker deleting a queue's messages)
// then does not share the cores with the next measurement.
func waitMachineIdle(ctx context.Context, max time.Duration) error {
	deadline := time.Now().Add(max)
	prevBusy, prevAll, ok := machineTicks()
	for ok && time.Now().Before(deadline) {
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
		busy, all, _ := machineTicks()
		if all > prevAll && float64(busy-prevBusy)/float64(all-prevAll) <= 0.15 {
			return nil
		}
		prevBusy, prevAll = busy, all
	}
	if ok {
		progress("the machine was still busy after %s; going on", max)
	}
	return nil
}

// machineTicks reads the busy and total CPU time of all cores from
// /proc/stat (false where there is none).
func machineTicks() (busy, all uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		all += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, all, true
}

func sleep(ctx context.Context, d time.Duration) error { return backoff.Sleep(ctx, d) }

var errTimeout = errors.New("timed out")

// rowQuerier is a connection to a server that reads one row: a *sql.DB,
// or the bench's counted pool on the primary.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

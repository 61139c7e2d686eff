package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/rediskey"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// leaseTTL is the relays' ha.lease_ttl: short, so that a takeover fits in
// a schedule of seconds.
const leaseTTL = 3 * time.Second

// brokerWindow is broker.window: the unconfirmed messages a lost
// connection may publish twice (the bounds in catalogue_test.go count it).
const brokerWindow = 256

// maxUnmarked is relay.max_unmarked as shipped (B in docs/ha.md): the
// confirmed rows that may wait for their SENT update.
const maxUnmarked = 4096

// env is one schedule's world: the switch topology (switch1 the primary,
// switch2 and switch3 its replicas and the relays' sources), a proxy in
// front of every server the relays reach, the relays, the consumers and the
// writer. Nothing of it is shared with other tests but the broker, which
// the relays reach through a proxy too, and the Redis topologies, which a
// schedule that fails them over holds (testenv.LockRedisTopologies).
type env struct {
	t     *testing.T
	s     *Schedule
	start time.Time
	tp    *testenv.Topology
	name  string // the relays'
	db    *sql.DB

	mu       sync.Mutex
	table    string   // the outbox table's name
	archives []string // tables a rotation renamed it to
	tenants  []string // the tenants configuration's other tables (tenantTables)
	cutovers int
	settings settings // what a config change changes
	woken    []Woken  // leaders deposed while paused

	primary  *faultproxy.Proxy
	replicas [2]*faultproxy.Proxy // switch2, switch3
	amqp     []*faultproxy.Proxy  // every relay's, to every broker node
	nodes    []string             // the broker nodes, host:port
	stream   *faultproxy.Proxy
	redisPx  *faultproxy.Proxy
	store    *privateRedis
	rc       redis.UniversalClient // the test's own look-ups (the lease)
	keys     rediskey.Space
	rabbit   *rabbitCluster3

	exchange, queue, streamName string
	brokerURLs                  []string // direct, for the consumers and barriers

	relays []*relayProc
	writer *writer
	rec    *recorder
}

// settings are the relay settings a config change moves between restarts.
type settings struct {
	Lanes       int
	Publishable string // statuses.publishable of the status table, "" for the preset's
	TimeZone    string // route.time_zone, "" for UTC
}

// relayProc is one relay of the schedule, run as a child process.
type relayProc struct {
	serverID uint32
	httpAddr string // its metrics (binlog_relay_unmarked_rows at a kill and at the end)
	cfg      string // the config file
	proc     *relaytest.Process
	logs     []string // every log file, one per start
	paused   bool
	amqp     []*faultproxy.Proxy // its own, to each broker node

	mu        sync.Mutex
	publishes []time.Time // each basic.publish it sent, when it passed its proxy
}

func (r *relayProc) published() {
	r.mu.Lock()
	r.publishes = append(r.publishes, time.Now())
	r.mu.Unlock()
}

// publishedBetween counts relay r's publishes in (from, to].
func (r *relayProc) publishedBetween(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, at := range r.publishes {
		if at.After(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// publishTap passes a client's AMQP 0-9-1 frames on unchanged and calls
// note for each basic.publish (a method frame, type 1, of class 60 and
// method 40: https://www.rabbitmq.com/resources/specs/amqp0-9-1.pdf, 4.2.3
// and 1.8.3), from the client's side of a proxy.
func publishTap(note func()) faultproxy.Tap {
	return func(server io.Writer, client io.Reader) {
		r := bufio.NewReaderSize(client, 64<<10)
		w := bufio.NewWriterSize(server, 64<<10)
		head := make([]byte, 8) // the protocol header first: "AMQP" 0 0 9 1
		if _, err := io.ReadFull(r, head); err != nil {
			return
		}
		if _, err := w.Write(head); err != nil || w.Flush() != nil {
			return
		}
		var fh [7]byte // type, channel, size
		for {
			if _, err := io.ReadFull(r, fh[:]); err != nil {
				return
			}
			size := int(binary.BigEndian.Uint32(fh[3:7]))
			if _, err := w.Write(fh[:]); err != nil {
				return
			}
			if fh[0] == 1 && size >= 4 {
				if m, err := r.Peek(4); err == nil && binary.BigEndian.Uint16(m[0:2]) == 60 && binary.BigEndian.Uint16(m[2:4]) == 40 {
					note()
				}
			}
			if _, err := io.CopyN(w, r, int64(size)+1); err != nil { // the payload and the frame end
				return
			}
			if r.Buffered() == 0 {
				if err := w.Flush(); err != nil {
					return
				}
			}
		}
	}
}

// recorder collects the history as it happens, from several goroutines.
type recorder struct {
	mu sync.Mutex
	h  History
	n  map[string]int // deliveries per source
}

func (r *recorder) deliver(d Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d.N = r.n[d.Src]
	r.n[d.Src]++
	r.h.Deliveries = append(r.h.Deliveries, d)
}

func (r *recorder) fault(f FaultEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Faults = append(r.h.Faults, f)
}

func (r *recorder) note(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Journal = append(r.h.Journal, line)
}

// delivered is the set of ids delivered so far with their bodies.
func (r *recorder) delivered() map[string]map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]map[string]bool{}
	for _, d := range r.h.Deliveries {
		if out[d.ID] == nil {
			out[d.ID] = map[string]bool{}
		}
		out[d.ID][normalize(d.Body)] = true
	}
	return out
}

func (e *env) note(format string, args ...any) {
	line := fmt.Sprintf("%6.1fs  ", time.Since(e.start).Seconds()) + fmt.Sprintf(format, args...)
	e.rec.note(line)
	e.t.Log(line)
}

// newEnv sets up the servers, proxies, broker objects and Redis of a
// schedule; the relays and the writer start in run.
func newEnv(t *testing.T, s *Schedule) *env {
	t.Helper()
	ddl := "schema/producer_message.sql"
	table := "producer_message"
	if !s.Config.Status() {
		ddl, table = "schema/debezium_outbox.sql", "outbox"
	}
	e := &env{t: t, s: s, tp: testenv.NewTopology(t, ddl), name: testenv.UniqueName("chaos"), table: table,
		settings: settings{Lanes: s.Config.Lanes()}, rec: &recorder{n: map[string]int{}}}
	e.rec.h.Schedule = *s
	e.db = e.tp.On(t, "switch1")
	if s.Config.Tenants() {
		for _, tt := range tenantTables {
			e.tp.Exec(t, "switch1", fmt.Sprintf("CREATE TABLE `%s`.`%s` LIKE `%s`.`%s`", e.tp.DB, tt, e.tp.DB, table))
		}
		e.tenants = tenantTables
	}
	e.start = time.Now()

	e.primary = testenv.Proxy(t, testenv.Addr(e.tp.DSN["switch1"]))
	e.replicas[0] = testenv.Proxy(t, testenv.Addr(e.tp.DSN["switch2"]))
	e.replicas[1] = testenv.Proxy(t, testenv.Addr(e.tp.DSN["switch3"]))

	switch s.Broker {
	case "cluster":
		e.rabbit = &rabbitCluster3{t: t}
		e.rabbit.waitWhole(90 * time.Second)
		e.exchange, e.queue = testenv.UniqueName("ex_chaos"), testenv.UniqueName("qq_chaos")
		e.rabbit.declareQuorumQueue(e.exchange, e.queue)
		for _, n := range rabbitNodes {
			e.nodes = append(e.nodes, fmt.Sprintf("127.0.0.1:%d", n.amqp))
			e.brokerURLs = append(e.brokerURLs, n.url())
		}
	default:
		br := testenv.NewBroker(t)
		e.exchange, e.queue = br.Exchange, br.Queue
		e.nodes = []string{testenv.AMQPHostPort()}
		e.brokerURLs = []string{testenv.AMQPURL}
	}
	if s.Config.Stream {
		e.streamName = testenv.UniqueName("chaos_stream")
		if err := testenv.StreamEnv(t).DeclareStream(e.streamName, nil); err != nil {
			t.Fatalf("declaring stream %s: %v", e.streamName, err)
		}
		t.Cleanup(func() { testenv.DeleteStream(t, e.streamName) })
		e.stream = testenv.Proxy(t, testenv.StreamAddr())
	}

	ctx := context.Background()
	switch s.Redis {
	case "sentinel", "cluster":
		testenv.LockRedisTopologies(t)
		stackSh(t, "redis-topologies") // healthy, or put back
		t.Cleanup(func() { stackSh(t, "redis-topologies") })
		if s.Redis == "sentinel" {
			e.rc = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.RedisSentinelMaster, SentinelAddrs: testenv.RedisSentinelAddrs})
		} else {
			e.rc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs})
		}
		e.keys = rediskey.For(e.name, s.Redis == "cluster")
		t.Cleanup(func() {
			for _, k := range []string{e.keys.Leader(), e.keys.Token(), e.keys.Checkpoint(), e.keys.Checkpoint() + ":first-saved", e.keys.Instance()} {
				e.rc.Del(ctx, k) // one at a time: a Cluster refuses a DEL across slots
			}
		})
	default:
		e.store = startRedis(t)
		e.redisPx = testenv.Proxy(t, e.store.addr)
		e.rc = redis.NewClient(&redis.Options{Addr: e.store.addr})
		e.keys = rediskey.For(e.name, false)
	}
	t.Cleanup(func() { _ = e.rc.Close() })

	// Each relay reaches the broker through proxies of its own, which count
	// what it publishes: a leader deposed while paused must publish nothing
	// once it wakes.
	for i := 0; i < s.Relays; i++ {
		r := &relayProc{serverID: 300000 + rand.Uint32N(1<<20), httpAddr: freeAddr(t)}
		for _, n := range e.nodes {
			p, err := faultproxy.ListenTap(n, publishTap(r.published))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			r.amqp = append(r.amqp, p)
			e.amqp = append(e.amqp, p)
		}
		e.relays = append(e.relays, r)
	}
	return e
}

// relayYAML is the relays' config for the current settings, with
// SERVER_ID for each relay's own replica server id and BROKER_URLS for its
// own proxies to the broker.
func (e *env) relayYAML() string {
	s := e.s
	e.mu.Lock()
	st := e.settings
	e.mu.Unlock()
	var table string
	tz := ""
	if st.TimeZone != "" {
		tz = ", time_zone: " + st.TimeZone
	}
	if s.Config.Status() {
		statuses := ""
		if st.Publishable != "" {
			statuses = fmt.Sprintf(", statuses: {publishable: [%s]}", st.Publishable)
		}
		table = fmt.Sprintf("  - {preset: producer-message, schema: %s, route: {partition_key: routing_key%s}%s}\n", e.tp.DB, tz, statuses)
		if s.Config.Tenants() {
			table += fmt.Sprintf("  - {preset: producer-message, schema: %s, name: \"tenant_?\", route: {partition_key: routing_key%s}%s}\n", e.tp.DB, tz, statuses)
		}
	} else {
		table = fmt.Sprintf("  - {preset: debezium, schema: %s, route: {partition_key: aggregateid%s}}\n", e.tp.DB, tz)
	}
	broker := "BROKER_URLS" + fmt.Sprintf(", window: %d", brokerWindow)
	if s.Config.Stream {
		broker += fmt.Sprintf(`, stream: {name: %s, uri: "%s"}`, e.streamName, testenv.StreamURI(e.stream.Addr()))
	}
	var rd string
	switch s.Redis {
	case "sentinel":
		rd = fmt.Sprintf(`{addrs: ["%s"], sentinel: {master_name: %s}, wait_replicas: 1, wait_timeout: 500ms}`,
			strings.Join(testenv.RedisSentinelAddrs, `", "`), testenv.RedisSentinelMaster)
	case "cluster":
		rd = fmt.Sprintf(`{addrs: ["%s"], cluster: true, wait_replicas: 1, wait_timeout: 500ms}`, strings.Join(testenv.RedisClusterAddrs, `", "`))
	default:
		rd = fmt.Sprintf(`{addr: "%s"}`, e.redisPx.Addr())
	}
	ha := "{enabled: false}"
	if s.Relays > 1 {
		ha = fmt.Sprintf("{enabled: true, lease_ttl: %s}", leaseTTL)
	}
	ordering := "relaxed"
	if s.Config.Ordering == "strict" {
		ordering = "strict"
	}
	return relaytest.Config{Name: e.name, Tables: table, Sections: map[string]string{
		"source":  fmt.Sprintf(`{hosts: ["%s", "%s"], user: root, server_id: SERVER_ID}`, e.replicas[0].Addr(), e.replicas[1].Addr()),
		"primary": fmt.Sprintf("{host: 127.0.0.1, port: %d, user: root}", e.primary.Port()),
		"broker":  "{" + broker + "}",
		"redis":   rd,
		"ha":      ha,
		"http":    `{addr: "HTTP_ADDR"}`,
		// The shipped checkpoint and flush intervals and sweeper grace:
		// chaos runs as in production. Retries come due in 3 s, so a row
		// routed nowhere ends FAILED within the run.
		"checkpoint": "",
		"relay":      fmt.Sprintf("{ordering: %s, lanes: %d}", ordering, st.Lanes),
		"sweeper":    "{interval: 1s}",
		"retry":      "{base: 3s, factor: 1, max: 3s, jitter: 0.1}",
	}}.YAML()
}

// writeConfigs writes every relay's config for the current settings.
func (e *env) writeConfigs() {
	y := e.relayYAML()
	for _, r := range e.relays {
		var broker string
		if len(r.amqp) == 1 {
			broker = fmt.Sprintf(`url: "amqp://guest:guest@%s/"`, r.amqp[0].Addr())
		} else {
			urls := make([]string, len(r.amqp))
			for i, p := range r.amqp {
				urls[i] = fmt.Sprintf(`"amqp://guest:guest@%s/"`, p.Addr())
			}
			broker = "urls: [" + strings.Join(urls, ", ") + "]"
		}
		c := strings.ReplaceAll(y, "SERVER_ID", fmt.Sprint(r.serverID))
		c = strings.ReplaceAll(c, "HTTP_ADDR", r.httpAddr)
		r.cfg = relaytest.WriteConfig(e.t, strings.ReplaceAll(c, "BROKER_URLS", broker))
	}
}

// startRelay starts relay i.
func (e *env) startRelay(i int) {
	r := e.relays[i]
	r.proc = relaytest.StartProcess(e.t, r.cfg)
	r.logs = append(r.logs, r.proc.Log)
	r.paused = false
}

// waitStarted waits until relay i streams the binlog and publishes (to the
// broker, or into the stream).
func (e *env) waitStarted(i int) {
	e.t.Helper()
	p := e.relays[i].proc
	testenv.WaitFor(e.t, 60*time.Second, "the relay to start", func() (bool, string) {
		l := p.LogText()
		return strings.Contains(l, "binlog stream connected") && (strings.Contains(l, "broker connected") || strings.Contains(l, "stream producer up")), "log:\n" + l
	})
}

// killRelay SIGKILLs relay i and waits for it to die.
func (e *env) killRelay(i int) error {
	r := e.relays[i]
	if r.proc == nil {
		return nil
	}
	_ = r.proc.Cmd.Process.Signal(syscall.SIGKILL)
	if _, err := r.proc.Wait(10 * time.Second); err != nil {
		return fmt.Errorf("relay %d did not die: %w", i, err)
	}
	return nil
}

// leader is the index of the relay holding the lease now (the only relay
// without HA), or -1.
func (e *env) leader() int {
	if len(e.relays) == 1 {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := e.rc.Get(ctx, e.keys.Leader()).Result()
	if err != nil {
		return -1
	}
	_, holder, _ := strings.Cut(v, ":")
	parts := strings.Split(holder, "-")
	if len(parts) < 3 {
		return -1
	}
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	for i, r := range e.relays {
		if r.proc != nil && r.proc.Cmd.Process.Pid == pid {
			return i
		}
	}
	return -1
}

// waitLeader waits for a leader other than not (-1: any) that is not
// paused.
func (e *env) waitLeader(not int, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for {
		if l := e.leader(); l >= 0 && l != not && !e.relays[l].paused {
			return l, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no relay (but %d) took the lease within %s", not, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readingFrom is the replica (0: switch2, 1: switch3) relay i streams
// from, by the server ids its replicas list, or -1.
func (e *env) readingFrom(i int) int {
	for k, n := range []string{"switch2", "switch3"} {
		rows, err := e.tp.Servers[n].Query(testenv.Current.ReplicaHostsSQL())
		if err != nil {
			continue
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			for j := range vals {
				vals[j] = new(sql.RawBytes)
			}
			if rows.Scan(vals...) == nil && string(*vals[0].(*sql.RawBytes)) == fmt.Sprint(e.relays[i].serverID) {
				rows.Close()
				return k
			}
		}
		rows.Close()
	}
	return -1
}

// tables are the tables the relay reads (the outbox table, and the tenant
// tables of the tenants configuration) and the archives, for the end state.
func (e *env) tables() (live, archives []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string{e.table}, e.tenants...), append([]string(nil), e.archives...)
}

func stackSh(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, testenv.RepoPath("scripts/stack.sh"), args...).CombinedOutput()
	if err != nil {
		t.Errorf("stack.sh %v: %v\n%s", args, err, out)
	}
}

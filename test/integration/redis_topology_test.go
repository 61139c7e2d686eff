package integration

// Redis topologies (docs/ha.md, "Redis Sentinel and Cluster"): two relays
// with ha.enabled on the stack's Sentinel group and on its Redis Cluster,
// and the Redis master they use taken away while rows stream. Nothing may
// be lost, at most one relay may lead at any time, and the relays must go
// on saving their checkpoint on the new master. Each test puts the stack's
// topology back as it found it (the killed node started again, a replica
// of the new master), so the next run finds it healthy.

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/rediskey"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// redisHAYAML is a two-relay HA config for name on the Redis section given,
// with the HTTP endpoints on (the leader watch reads /leader).
func redisHAYAML(name, db, redisSection string) string {
	return relaytest.Config{Name: name, Tables: relaytest.SeedTable(db),
		Sections: map[string]string{"redis": redisSection, "http": `{addr: "127.0.0.1:0"}`},
		Extra:    fmt.Sprintf("ha: {enabled: true, lease_ttl: %s}\n", haTTL)}.YAML()
}

func flowList(addrs []string) string {
	return `["` + strings.Join(addrs, `", "`) + `"]`
}

// leaderWatch polls /leader of every relay until stopped: how many looks
// found two leaders at once, and the order in which relays led.
type leaderWatch struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	// looks, both: looks taken, and looks in which more than one relay
	// answered 200; seen: the relays that led, one entry per change.
	looks, both int
	seen        []string
}

func watchLeaders(t *testing.T, relays ...*haRelay) *leaderWatch {
	w := &leaderWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		last := ""
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			var leading []string
			for i, r := range relays {
				if code, _ := r.status("/leader"); code == http.StatusOK {
					leading = append(leading, string(rune('a'+i)))
				}
			}
			now := strings.Join(leading, "+")
			if now == "" {
				now = "none"
			}
			w.mu.Lock()
			w.looks++
			if len(leading) > 1 {
				w.both++
			}
			if now != last {
				w.seen = append(w.seen, now)
				last = now
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *leaderWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// result stops the watch and returns what it saw.
func (w *leaderWatch) result() (looks, both int, seen string) {
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.looks, w.both, strings.Join(w.seen, " -> ")
}

// redisPID is the process id of the Redis server at addr.
func redisPID(t *testing.T, addr string) int {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server on %s: %v", addr, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if pid, err := strconv.Atoi(v); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no process_id in INFO server of %s", addr)
	return 0
}

func killRedis(t *testing.T, addr string) {
	t.Helper()
	pid := redisPID(t, addr)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing redis %s (pid %d): %v", addr, pid, err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil },
		"redis %s (pid %d) still runs after SIGKILL", addr, pid)
}

// checkpointSavedSince waits until the checkpoint under key, read through
// rc, was saved after since and covers gtid.
func checkpointSavedSince(t *testing.T, rc redis.UniversalClient, key string, since time.Time, gtid string) checkpoint.Checkpoint {
	t.Helper()
	var cp checkpoint.Checkpoint
	var err error
	testenv.Eventually(t, 30*time.Second, func() bool {
		cp, err = checkpoint.NewRedis(rc, key).Load(context.Background())
		if err != nil || !cp.SavedAt.After(since) {
			return false
		}
		ok, _ := binlog.ContainsGTID(cp.Flavor, cp.GTIDSet, gtid)
		return ok
	}, "checkpoint %s: not saved after %s covering %s (last read %+v, %v)", key, since.Format(time.RFC3339Nano), gtid, &cp, err)
	return cp
}

// dropKeys deletes the relay's keys when the test ends.
func dropKeys(t *testing.T, rc redis.UniversalClient, keys rediskey.Space) {
	t.Cleanup(func() {
		ctx := context.Background()
		for _, k := range []string{keys.Leader(), keys.Token(), keys.Checkpoint(), keys.Checkpoint() + ":first-saved", keys.Instance()} {
			rc.Del(ctx, k) // one at a time: in a Cluster a DEL of several keys must not span slots
		}
	})
}

// Two relays on the Sentinel group, redis.wait_replicas 1; the master is
// SIGKILLed while rows stream and the Sentinels promote a replica.
func TestRedisSentinelFailover(t *testing.T) {
	testenv.Integration(t)
	testenv.LockRedisTopologies(t)
	stack(t, "redis-topologies") // healthy, or put back (an earlier run's restore may be syncing)
	t.Cleanup(func() { stack(t, "redis-topologies") })
	ctx := context.Background()
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: testenv.RedisSentinelAddrs[0]})
	t.Cleanup(func() { _ = sentinel.Close() })
	rc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.RedisSentinelMaster,
		SentinelAddrs: testenv.RedisSentinelAddrs})
	t.Cleanup(func() { _ = rc.Close() })
	masterAddr := func() string {
		a, err := sentinel.GetMasterAddrByName(ctx, testenv.RedisSentinelMaster).Result()
		if err != nil || len(a) != 2 {
			return ""
		}
		return a[0] + ":" + a[1]
	}

	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("sentinel")
	keys := rediskey.For(name, false)
	dropKeys(t, rc, keys)
	cfg := relaytest.WriteConfig(t, redisHAYAML(name, db.Name, fmt.Sprintf(
		"{addrs: %s, sentinel: {master_name: %s}, wait_replicas: 1, wait_timeout: 500ms}",
		flowList(testenv.RedisSentinelAddrs), testenv.RedisSentinelMaster)))
	a := startHARelay(t, cfg)
	waitLogged(t, a.p, "leader lease acquired", 1, 30*time.Second)
	a.p.WaitStarted(t)
	b := startHARelay(t, cfg)
	waitLogged(t, b.p, "standby: another relay holds the leader lease; waiting", 1, 30*time.Second)
	watch := watchLeaders(t, a, b)

	prod := startPaced(t, db, br.Exchange, "sentinel", 300, 10, 20*time.Millisecond) // 500 rows/s for 6 s
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= 800 }, "only %d delivered before the kill", got.Len())
	old := masterAddr()
	killRedis(t, old)
	killed := time.Now()
	var promoted time.Duration
	testenv.Eventually(t, 30*time.Second, func() bool {
		if m := masterAddr(); m != "" && m != old {
			promoted = time.Since(killed)
			return true
		}
		return false
	}, "the Sentinels did not promote a replica of %s", old)

	want := prod.wait(t)
	waitAllDistinct(t, got, want, 60*time.Second)
	// The relays went on with the new master: the checkpoint there was
	// saved after the failover and covers the last commit.
	cp := checkpointSavedSince(t, rc, keys.Checkpoint(), killed, primaryGTID(t, db))
	looks, both, seen := watch.result()
	distinct, dups := got.Distinct()
	t.Logf("master %s killed, %s promoted %s later; %d rows, %d distinct delivered, %d duplicates; leaders seen %s (%d looks, %d with two leaders); checkpoint saved %s after the kill",
		old, masterAddr(), promoted.Round(time.Millisecond), len(want), distinct, dups, seen, looks, both, cp.SavedAt.Sub(killed).Round(time.Millisecond))
	logLeaseEvents(t, a, b)
	if both > 0 {
		t.Fatalf("two relays answered /leader 200 at once in %d of %d looks (%s)", both, looks, seen)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) },
		"statuses: %v", statusCounts(t, db.Primary))
}

// logLeaseEvents logs, per relay, the lease and Redis events of its log:
// why a term ended, and the writes fewer replicas acknowledged.
func logLeaseEvents(t *testing.T, relays ...*haRelay) {
	t.Helper()
	for i, r := range relays {
		var events []string
		for _, m := range []string{"leader lease acquired", "leader lease lost: stop publishing",
			"leader lease taken but not acknowledged by enough replicas: released, not leading this term; retrying",
			"leader lease renewed but not acknowledged by enough replicas; retrying",
			"renewing the leader lease failed; retrying",
			"checkpoint saved but not acknowledged by enough redis replicas: a failover now could lose it (the relay would replay from an earlier one: duplicates, no loss)",
			"the checkpoint in redis is behind the one this relay saved last (writes lost in a redis failover?); resuming from redis's: the rows in between are published again"} {
			for _, l := range logged(r.p, m) {
				e := fmt.Sprintf("%v %s", l["ts"], m)
				for _, f := range []string{"reason", "error", "token"} {
					if v, ok := l[f]; ok {
						e += fmt.Sprintf(" %s=%v", f, v)
					}
				}
				events = append(events, e)
			}
		}
		sort.Strings(events)
		t.Logf("relay %c: %d lease and redis events:\n  %s", 'a'+i, len(events), strings.Join(events, "\n  "))
	}
}

// Two relays on the Redis Cluster, their keys under the {name} hash tag,
// redis.wait_replicas 1. The replica of the master holding their slot is
// promoted (CLUSTER FAILOVER) while rows stream, then the old master, its
// only replica now, is SIGKILLed: with no replica to acknowledge the lease
// no relay may lead, until the killed node is back (as a replica).
func TestRedisClusterFailover(t *testing.T) {
	testenv.Integration(t)
	testenv.LockRedisTopologies(t)
	stack(t, "redis-topologies")
	t.Cleanup(func() { stack(t, "redis-topologies") })
	ctx := context.Background()
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs})
	t.Cleanup(func() { _ = rc.Close() })

	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("cluster")
	keys := rediskey.For(name, true)
	dropKeys(t, rc, keys)
	master, err := rc.MasterForKey(ctx, keys.Leader())
	if err != nil {
		t.Fatal(err)
	}
	oldAddr := master.Options().Addr
	id, err := master.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		t.Fatal(err)
	}
	lines, err := master.ClusterSlaves(ctx, id).Result()
	if err != nil || len(lines) != 1 {
		t.Fatalf("replicas of %s: %q %v, want one", oldAddr, lines, err)
	}
	replicaAddr, _, _ := strings.Cut(strings.Fields(lines[0])[1], "@")
	replica := redis.NewClient(&redis.Options{Addr: replicaAddr})
	t.Cleanup(func() { _ = replica.Close() })

	cfg := relaytest.WriteConfig(t, redisHAYAML(name, db.Name, fmt.Sprintf(
		"{addrs: %s, cluster: true, wait_replicas: 1, wait_timeout: 500ms}", flowList(testenv.RedisClusterAddrs))))
	a := startHARelay(t, cfg)
	waitLogged(t, a.p, "leader lease acquired", 1, 30*time.Second)
	a.p.WaitStarted(t)
	b := startHARelay(t, cfg)
	waitLogged(t, b.p, "standby: another relay holds the leader lease; waiting", 1, 30*time.Second)
	watch := watchLeaders(t, a, b)
	leading := func() int {
		n := 0
		for _, r := range []*haRelay{a, b} {
			if code, _ := r.status("/leader"); code == http.StatusOK {
				n++
			}
		}
		return n
	}

	prod := startPaced(t, db, br.Exchange, "cluster", 400, 10, 20*time.Millisecond) // 500 rows/s for 8 s
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= 800 }, "only %d delivered before the failover", got.Len())
	if err := replica.Do(ctx, "cluster", "failover").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER on %s: %v", replicaAddr, err)
	}
	failedOver := time.Now()
	testenv.Eventually(t, 20*time.Second, func() bool {
		role, err := replica.Do(ctx, "role").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	}, "%s was not promoted", replicaAddr)
	promoted := time.Since(failedOver)
	// The relays follow the slot to its new master (MOVED): rows go on.
	moved := got.Len()
	testenv.Eventually(t, 20*time.Second, func() bool { return got.Len() >= moved+300 },
		"delivered %d since the failover", got.Len()-moved)

	killRedis(t, oldAddr)
	killed := time.Now()
	testenv.Eventually(t, 20*time.Second, func() bool { return leading() == 0 },
		"a relay still leads with no replica to acknowledge its lease")
	steppedDown := time.Since(killed)
	held := got.Len()
	stack(t, "redis-topologies") // the killed node back, a replica of the new master
	restored := time.Since(killed)

	want := prod.wait(t)
	waitAllDistinct(t, got, want, 60*time.Second)
	cp := checkpointSavedSince(t, rc, keys.Checkpoint(), killed, primaryGTID(t, db))
	looks, both, seen := watch.result()
	distinct, dups := got.Distinct()
	t.Logf("slot master %s failed over to %s in %s; %s killed: no leader %s later, node back %s after the kill (%d delivered by then); %d rows, %d distinct delivered, %d duplicates; leaders seen %s (%d looks, %d with two leaders); checkpoint saved %s after the kill",
		oldAddr, replicaAddr, promoted.Round(time.Millisecond), oldAddr, steppedDown.Round(time.Millisecond), restored.Round(time.Millisecond),
		held, len(want), distinct, dups, seen, looks, both, cp.SavedAt.Sub(killed).Round(time.Millisecond))
	logLeaseEvents(t, a, b)
	if both > 0 {
		t.Fatalf("two relays answered /leader 200 at once in %d of %d looks (%s)", both, looks, seen)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) },
		"statuses: %v", statusCounts(t, db.Primary))
}

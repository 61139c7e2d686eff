package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Fault is one kind of failure the harness injects, as etcd's robustness
// tests have failpoints: a name, where it applies, how long it lasts, how
// it is injected and recovered, and how many duplicates the docs allow it
// (docs/ha.md, "What each fault costs"). Inject may leave what Recover
// needs in st.
type Fault interface {
	Name() string
	Available(s *Schedule) bool
	Hold(s *Schedule) (lo, hi time.Duration)
	Bound(s *Schedule, p Planned) int
	Inject(e *env, p Planned, st *state) (string, error)
	Recover(e *env, p Planned, st *state) (string, error)
}

// state carries what an injection did to its recovery.
type state struct {
	relay   int // the relay paused
	replica int // the replica stopped or cut
}

// catalogue is every fault, in the order the summary lists them.
var catalogue = []Fault{
	relayKill{}, leaderTakeover{}, relayPause{},
	brokerReset{}, brokerBlackhole{}, streamBlackhole{}, rabbitNodeStop{},
	redisRestart{}, redisCut{}, sentinelFailover{}, clusterFailover{},
	replicaStop{}, replicaFailover{}, primaryCut{},
	cutOver{steps: 1}, cutOver{steps: 2}, rotation{}, requeue{}, configChange{},
}

func byName(name string) Fault {
	for _, f := range catalogue {
		if f.Name() == name {
			return f
		}
	}
	panic("chaos: no fault " + name)
}

// lanesBound is the most lanes the schedule's relays run with (a config
// change moves between the configuration's lanes and 2).
func lanesBound(s *Schedule) int {
	n := s.Config.Lanes()
	for _, p := range s.Faults {
		if p.Kind == "config-change" {
			n = max(n, 2)
		}
	}
	return n
}

// windowBound is what a lost broker connection costs: every lane's
// unconfirmed messages published again (docs/ha.md). The stream
// deduplicates them.
func windowBound(s *Schedule) int {
	if s.Config.Stream {
		return 0
	}
	return lanesBound(s) * brokerWindow
}

// crashBound is what a relay that stops without draining costs: the rows in
// flight, published and not yet marked: every lane's window plus a batch of
// confirmed rows waiting for their SENT update (docs/ha.md, "Exactly what a
// crash costs"). The stream deduplicates them by publishing id.
func crashBound(s *Schedule) int {
	if s.Config.Stream {
		return 0
	}
	return lanesBound(s)*brokerWindow + batchSize
}

// haBound is a fault that costs the leader its lease: a takeover, as a
// crash; without a lease the relay holds and goes on, nothing twice.
func haBound(s *Schedule) int {
	if s.Relays > 1 {
		return crashBound(s)
	}
	return 0
}

func span(s *Schedule, short, long [2]time.Duration) (time.Duration, time.Duration) {
	if s.Profile.Long {
		return long[0], long[1]
	}
	return short[0], short[1]
}

// ---- relays

type relayKill struct{}

func (relayKill) Name() string                                  { return "relay-kill" }
func (relayKill) Available(*Schedule) bool                      { return true }
func (relayKill) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (relayKill) Bound(s *Schedule, _ Planned) int              { return crashBound(s) }
func (relayKill) Inject(e *env, _ Planned, _ *state) (string, error) {
	l, err := e.waitLeader(-1, 30*time.Second)
	if err != nil {
		return "", err
	}
	if err := e.killRelay(l); err != nil {
		return "", err
	}
	e.startRelay(l)
	return fmt.Sprintf("SIGKILL of the leader (relay %d), started again at once", l), nil
}
func (relayKill) Recover(*env, Planned, *state) (string, error) { return "", nil }

type leaderTakeover struct{}

func (leaderTakeover) Name() string                                  { return "leader-kill-takeover" }
func (leaderTakeover) Available(s *Schedule) bool                    { return s.Relays > 1 }
func (leaderTakeover) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (leaderTakeover) Bound(s *Schedule, _ Planned) int              { return crashBound(s) }
func (leaderTakeover) Inject(e *env, _ Planned, _ *state) (string, error) {
	l, err := e.waitLeader(-1, 30*time.Second)
	if err != nil {
		return "", err
	}
	if err := e.killRelay(l); err != nil {
		return "", err
	}
	at := time.Now()
	n, err := e.waitLeader(l, 30*time.Second)
	if err != nil {
		return "", err
	}
	took := time.Since(at)
	e.startRelay(l)
	return fmt.Sprintf("SIGKILL of the leader (relay %d); relay %d took over after %s; the dead one started again", l, n, took.Round(100*time.Millisecond)), nil
}
func (leaderTakeover) Recover(*env, Planned, *state) (string, error) { return "", nil }

// relayPause stops the leader with SIGSTOP: with a lease, past its TTL (a
// standby takes over; the docs say the woken one publishes nothing);
// without one, for as long as the schedule draws (its sweeper must not send
// what its own reader has not reached).
type relayPause struct{}

func (relayPause) Name() string             { return "relay-pause" }
func (relayPause) Available(*Schedule) bool { return true }
func (relayPause) Hold(s *Schedule) (time.Duration, time.Duration) {
	if s.Relays > 1 {
		return span(s, [2]time.Duration{leaseTTL + 500*time.Millisecond, leaseTTL + 2*time.Second}, [2]time.Duration{leaseTTL + 500*time.Millisecond, 10 * time.Second})
	}
	return span(s, [2]time.Duration{2 * time.Second, 6 * time.Second}, [2]time.Duration{2 * time.Second, 75 * time.Second})
}
func (relayPause) Bound(s *Schedule, _ Planned) int {
	if s.Relays > 1 {
		return crashBound(s)
	}
	return windowBound(s) // the broker may close a connection that stops beating
}
func (relayPause) Inject(e *env, _ Planned, st *state) (string, error) {
	l, err := e.waitLeader(-1, 30*time.Second)
	if err != nil {
		return "", err
	}
	if err := e.relays[l].proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return "", err
	}
	e.relays[l].paused = true
	st.relay = l
	return fmt.Sprintf("SIGSTOP of the leader (relay %d)", l), nil
}
func (relayPause) Recover(e *env, _ Planned, st *state) (string, error) {
	r := e.relays[st.relay]
	if err := r.proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return "", err
	}
	r.paused = false
	if len(e.relays) > 1 {
		woke := time.Now()
		l := e.leader()
		if l != st.relay && l >= 0 && e.s.Traffic.Poison == 0 {
			// Deposed: what it publishes from now on is counted (a row
			// due for its sweeper would be too: none is due without
			// failing rows).
			e.mu.Lock()
			e.woken = append(e.woken, Woken{Relay: st.relay, At: woke, Until: woke.Add(2 * leaseTTL)})
			e.mu.Unlock()
		}
		return fmt.Sprintf("SIGCONT; relay %d leads", l), nil
	}
	return "SIGCONT", nil
}

// ---- broker

type brokerReset struct{}

func (brokerReset) Name() string             { return "broker-reset" }
func (brokerReset) Available(*Schedule) bool { return true }
func (brokerReset) Hold(s *Schedule) (time.Duration, time.Duration) {
	return span(s, [2]time.Duration{time.Second, 4 * time.Second}, [2]time.Duration{time.Second, 20 * time.Second})
}
func (brokerReset) Bound(s *Schedule, _ Planned) int { return windowBound(s) }
func (brokerReset) Inject(e *env, _ Planned, _ *state) (string, error) {
	for _, p := range e.amqp {
		p.Cut()
	}
	return "AMQP connections reset (RST) and refused", nil
}
func (brokerReset) Recover(e *env, _ Planned, _ *state) (string, error) {
	for _, p := range e.amqp {
		p.Restore()
	}
	return "", nil
}

type brokerBlackhole struct{}

func (brokerBlackhole) Name() string             { return "broker-blackhole" }
func (brokerBlackhole) Available(*Schedule) bool { return true }
func (brokerBlackhole) Hold(s *Schedule) (time.Duration, time.Duration) {
	// Long ones outlast the AMQP heartbeat (10 s, three missed).
	return span(s, [2]time.Duration{2 * time.Second, 6 * time.Second}, [2]time.Duration{2 * time.Second, 45 * time.Second})
}
func (brokerBlackhole) Bound(s *Schedule, _ Planned) int { return windowBound(s) }
func (brokerBlackhole) Inject(e *env, _ Planned, _ *state) (string, error) {
	for _, p := range e.amqp {
		p.Blackhole()
	}
	return "AMQP blackholed: no answer, no RST", nil
}
func (brokerBlackhole) Recover(e *env, p Planned, _ *state) (string, error) {
	return heal(e.amqp, p), nil
}

// heal ends a blackhole: as a network that heals (what was held goes
// through), or, for odd Args, as one whose firewall or NAT lost the
// connections' state (they are reset, what was held is lost).
func heal(ps []*faultproxy.Proxy, p Planned) string {
	if p.Arg%2 == 1 {
		for _, x := range ps {
			x.Cut()
		}
		for _, x := range ps {
			x.Restore()
		}
		return "ended with the connections reset"
	}
	for _, x := range ps {
		x.Restore()
	}
	return "healed"
}

type streamBlackhole struct{}

func (streamBlackhole) Name() string               { return "stream-blackhole" }
func (streamBlackhole) Available(s *Schedule) bool { return s.Config.Stream }
func (streamBlackhole) Hold(s *Schedule) (time.Duration, time.Duration) {
	// Long ones outlast the stream lane's confirm timeout (30 s): the lane fails.
	return span(s, [2]time.Duration{2 * time.Second, 6 * time.Second}, [2]time.Duration{2 * time.Second, 45 * time.Second})
}
func (streamBlackhole) Bound(*Schedule, Planned) int { return 0 }
func (streamBlackhole) Inject(e *env, _ Planned, _ *state) (string, error) {
	e.stream.Blackhole()
	return "stream port blackholed", nil
}
func (streamBlackhole) Recover(e *env, p Planned, _ *state) (string, error) {
	return heal([]*faultproxy.Proxy{e.stream}, p), nil
}

// rabbitNodeStop stops the app of one node of the three-node cluster
// (rabbitmqctl stop_app, as for maintenance): the relay moves to the next
// node of broker.urls.
type rabbitNodeStop struct{}

func (rabbitNodeStop) Name() string               { return "rabbit-node-stop" }
func (rabbitNodeStop) Available(s *Schedule) bool { return s.Broker == "cluster" }
func (rabbitNodeStop) Hold(*Schedule) (time.Duration, time.Duration) {
	return 5 * time.Second, 20 * time.Second
}
func (rabbitNodeStop) Bound(s *Schedule, _ Planned) int { return windowBound(s) }
func (rabbitNodeStop) Inject(e *env, p Planned, st *state) (string, error) {
	n := rabbitNodes[p.Arg%len(rabbitNodes)]
	st.replica = p.Arg % len(rabbitNodes)
	if err := e.rabbit.run(n, "stop_app"); err != nil {
		return "", err
	}
	return "stop_app on " + n.full(), nil
}
func (rabbitNodeStop) Recover(e *env, _ Planned, st *state) (string, error) {
	n := rabbitNodes[st.replica]
	if err := e.rabbit.run(n, "start_app"); err != nil {
		return "", err
	}
	return "start_app on " + n.full(), nil
}

// ---- Redis

type redisRestart struct{}

func (redisRestart) Name() string                                  { return "redis-restart" }
func (redisRestart) Available(s *Schedule) bool                    { return s.Redis == "single" }
func (redisRestart) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (redisRestart) Bound(s *Schedule, _ Planned) int              { return haBound(s) }
func (redisRestart) Inject(e *env, _ Planned, _ *state) (string, error) {
	took := e.store.restart()
	return fmt.Sprintf("Redis restarted (SHUTDOWN SAVE, start): %s", took.Round(100*time.Millisecond)), nil
}
func (redisRestart) Recover(*env, Planned, *state) (string, error) { return "", nil }

type redisCut struct{}

func (redisCut) Name() string               { return "redis-cut" }
func (redisCut) Available(s *Schedule) bool { return s.Redis == "single" }
func (redisCut) Hold(s *Schedule) (time.Duration, time.Duration) {
	return span(s, [2]time.Duration{time.Second, 5 * time.Second}, [2]time.Duration{time.Second, 15 * time.Second})
}
func (redisCut) Bound(s *Schedule, _ Planned) int { return haBound(s) }
func (redisCut) Inject(e *env, _ Planned, _ *state) (string, error) {
	e.redisPx.Cut()
	return "Redis unreachable (proxy cut)", nil
}
func (redisCut) Recover(e *env, _ Planned, _ *state) (string, error) {
	e.redisPx.Restore()
	return "", nil
}

// sentinelFailover SIGKILLs the master of the stack's Sentinel group; the
// Sentinels promote a replica. The recovery starts the killed node again,
// a replica of the new master (scripts/stack.sh redis-topologies).
type sentinelFailover struct{}

func (sentinelFailover) Name() string                                  { return "sentinel-failover" }
func (sentinelFailover) Available(s *Schedule) bool                    { return s.Redis == "sentinel" }
func (sentinelFailover) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (sentinelFailover) Bound(s *Schedule, _ Planned) int              { return haBound(s) }
func (sentinelFailover) Inject(e *env, _ Planned, _ *state) (string, error) {
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: testenv.RedisSentinelAddrs[0]})
	defer sc.Close()
	master := func() string {
		a, err := sc.GetMasterAddrByName(ctx, testenv.RedisSentinelMaster).Result()
		if err != nil || len(a) != 2 {
			return ""
		}
		return a[0] + ":" + a[1]
	}
	old := master()
	if err := killRedisAt(old); err != nil {
		return "", err
	}
	at := time.Now()
	for {
		if m := master(); m != "" && m != old {
			return fmt.Sprintf("SIGKILL of the master %s; %s promoted after %s", old, m, time.Since(at).Round(100*time.Millisecond)), nil
		}
		if time.Since(at) > 30*time.Second {
			return "", fmt.Errorf("the Sentinels promoted no replica of %s within 30 s", old)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
func (sentinelFailover) Recover(e *env, _ Planned, _ *state) (string, error) {
	stackSh(e.t, "redis-topologies")
	return "the killed node started again as a replica", nil
}

// clusterFailover promotes the replica of the master holding the relays'
// slot (CLUSTER FAILOVER).
type clusterFailover struct{}

func (clusterFailover) Name() string                                  { return "cluster-failover" }
func (clusterFailover) Available(s *Schedule) bool                    { return s.Redis == "cluster" }
func (clusterFailover) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (clusterFailover) Bound(s *Schedule, _ Planned) int              { return haBound(s) }
func (clusterFailover) Inject(e *env, _ Planned, _ *state) (string, error) {
	ctx := context.Background()
	cc := e.rc.(*redis.ClusterClient)
	master, err := cc.MasterForKey(ctx, e.keys.Leader())
	if err != nil {
		return "", err
	}
	id, err := master.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return "", err
	}
	lines, err := master.ClusterSlaves(ctx, id).Result()
	if err != nil || len(lines) == 0 {
		return "", fmt.Errorf("replicas of %s: %q %v", master.Options().Addr, lines, err)
	}
	addr, _, _ := strings.Cut(strings.Fields(lines[0])[1], "@")
	replica := redis.NewClient(&redis.Options{Addr: addr})
	defer replica.Close()
	if err := replica.Do(ctx, "cluster", "failover").Err(); err != nil {
		return "", fmt.Errorf("CLUSTER FAILOVER on %s: %w", addr, err)
	}
	at := time.Now()
	for {
		role, err := replica.Do(ctx, "role").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return fmt.Sprintf("CLUSTER FAILOVER: %s took the slot from %s after %s", addr, master.Options().Addr, time.Since(at).Round(100*time.Millisecond)), nil
		}
		if time.Since(at) > 20*time.Second {
			return "", fmt.Errorf("%s was not promoted within 20 s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
func (clusterFailover) Recover(*env, Planned, *state) (string, error) { return "", nil }

// ---- the database

var switches = []string{"switch2", "switch3"}

// sourceOf is the replica the leader reads (0 when it cannot tell).
func sourceOf(e *env) int {
	l := e.leader()
	if l < 0 {
		return 0
	}
	if k := e.readingFrom(l); k >= 0 {
		return k
	}
	return 0
}

// replicaStop stops replication on the leader's source: it lags, then
// catches up.
type replicaStop struct{}

func (replicaStop) Name() string             { return "replica-stop" }
func (replicaStop) Available(*Schedule) bool { return true }
func (replicaStop) Hold(s *Schedule) (time.Duration, time.Duration) {
	return span(s, [2]time.Duration{time.Second, 6 * time.Second}, [2]time.Duration{time.Second, 20 * time.Second})
}
func (replicaStop) Bound(*Schedule, Planned) int { return 0 }
func (replicaStop) Inject(e *env, _ Planned, st *state) (string, error) {
	st.replica = sourceOf(e)
	if _, err := e.tp.Servers[switches[st.replica]].Exec(testenv.StopReplicaSQL); err != nil {
		return "", err
	}
	return "STOP REPLICA on " + switches[st.replica] + ", the leader's source", nil
}
func (replicaStop) Recover(e *env, _ Planned, st *state) (string, error) {
	_, err := e.tp.Servers[switches[st.replica]].Exec(testenv.StartReplicaSQL)
	return "START REPLICA", err
}

// replicaFailover cuts the leader's source off: it moves to the other
// replica by GTID.
type replicaFailover struct{}

func (replicaFailover) Name() string             { return "replica-failover" }
func (replicaFailover) Available(*Schedule) bool { return true }
func (replicaFailover) Hold(s *Schedule) (time.Duration, time.Duration) {
	return span(s, [2]time.Duration{2 * time.Second, 5 * time.Second}, [2]time.Duration{2 * time.Second, 15 * time.Second})
}
func (replicaFailover) Bound(*Schedule, Planned) int { return 0 }
func (replicaFailover) Inject(e *env, _ Planned, st *state) (string, error) {
	st.replica = sourceOf(e)
	e.replicas[st.replica].Cut()
	return switches[st.replica] + " cut off (the leader's source)", nil
}
func (replicaFailover) Recover(e *env, _ Planned, st *state) (string, error) {
	to := "no replica"
	if l := e.leader(); l >= 0 {
		if k := e.readingFrom(l); k >= 0 {
			to = switches[k]
		}
	}
	e.replicas[st.replica].Restore()
	return "the leader reads " + to, nil
}

type primaryCut struct{}

func (primaryCut) Name() string             { return "primary-cut" }
func (primaryCut) Available(*Schedule) bool { return true }
func (primaryCut) Hold(s *Schedule) (time.Duration, time.Duration) {
	return span(s, [2]time.Duration{time.Second, 5 * time.Second}, [2]time.Duration{time.Second, 20 * time.Second})
}
func (primaryCut) Bound(*Schedule, Planned) int { return 0 }
func (primaryCut) Inject(e *env, _ Planned, _ *state) (string, error) {
	e.primary.Cut()
	return "the relays' connections to the primary cut", nil
}
func (primaryCut) Recover(e *env, _ Planned, _ *state) (string, error) {
	e.primary.Restore()
	return "", nil
}

// cutOver is an online schema change's cut-over as gh-ost runs it: a ghost
// table created like the outbox table and filled in chunks while the
// application writes, then, with its writes held, the last rows and the
// statuses the relay marked copied over, and the swap: one RENAME of both
// tables (steps 1, gh-ost's default), or two (steps 2: gh-ost's
// --cut-over=two-step, Facebook's OSC). The old table is kept (_t_del),
// dropped by the next cut-over.
type cutOver struct{ steps int }

func (c cutOver) Name() string                                { return fmt.Sprintf("cutover-%dstep", c.steps) }
func (cutOver) Available(*Schedule) bool                      { return true }
func (cutOver) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (cutOver) Bound(*Schedule, Planned) int                  { return 0 }
func (c cutOver) Inject(e *env, _ Planned, _ *state) (string, error) {
	t := e.table
	gho, del := "_"+t+"_gho", "_"+t+"_del"
	db := e.db
	status := e.s.Config.Status()
	if err := execAll(db, "DROP TABLE IF EXISTS `"+del+"`", "DROP TABLE IF EXISTS `"+gho+"`",
		fmt.Sprintf("CREATE TABLE `%s` LIKE `%s`", gho, t)); err != nil {
		return "", err
	}
	// The row copy, beside the writer.
	var top int64
	if status {
		if err := db.QueryRow(fmt.Sprintf("SELECT COALESCE(MAX(id), 0) FROM `%s`", t)).Scan(&top); err != nil {
			return "", err
		}
		for lo := int64(0); lo < top; lo += 1000 {
			if err := execAll(db, fmt.Sprintf("INSERT IGNORE INTO `%s` SELECT * FROM `%s` WHERE id > %d AND id <= %d LOCK IN SHARE MODE", gho, t, lo, min(lo+1000, top))); err != nil {
				return "", err
			}
		}
	} else if err := execAll(db, fmt.Sprintf("INSERT IGNORE INTO `%s` SELECT * FROM `%s` LOCK IN SHARE MODE", gho, t)); err != nil {
		return "", err
	}
	e.writer.hold.Lock()
	defer e.writer.hold.Unlock()
	var sync []string
	if status {
		sync = []string{
			fmt.Sprintf("INSERT IGNORE INTO `%s` SELECT * FROM `%s` WHERE id > %d", gho, t, top),
			// What gh-ost's binlog applier would have applied meanwhile:
			// the relay's marks, the re-queues.
			fmt.Sprintf("UPDATE `%s` g JOIN `%s` s ON g.id = s.id SET g.status = s.status, g.content = s.content, g.retry_count = s.retry_count, "+
				"g.next_retry_time = s.next_retry_time, g.error_msg = s.error_msg, g.update_time = s.update_time, g.version = s.version "+
				"WHERE g.version <> s.version OR g.status <> s.status OR g.content <> s.content", gho, t),
		}
	} else {
		sync = []string{fmt.Sprintf("INSERT IGNORE INTO `%s` SELECT * FROM `%s`", gho, t)}
	}
	if err := execAll(db, sync...); err != nil {
		return "", err
	}
	rename := []string{fmt.Sprintf("RENAME TABLE `%s` TO `%s`, `%s` TO `%s`", t, del, gho, t)}
	if c.steps == 2 {
		rename = []string{fmt.Sprintf("RENAME TABLE `%s` TO `%s`", t, del), fmt.Sprintf("RENAME TABLE `%s` TO `%s`", gho, t)}
	}
	if err := execAll(db, rename...); err != nil {
		return "", err
	}
	e.mu.Lock()
	e.cutovers++
	e.mu.Unlock()
	return strings.Join(rename, "; "), nil
}
func (cutOver) Recover(*env, Planned, *state) (string, error) { return "", nil }

// rotation archives the outbox table: a new one created like it, then
// RENAME TABLE t TO t_arch_N, t_new TO t (its ids start at 1 again).
type rotation struct{}

func (rotation) Name() string                                  { return "rename-rotation" }
func (rotation) Available(*Schedule) bool                      { return true }
func (rotation) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (rotation) Bound(*Schedule, Planned) int                  { return 0 }
func (rotation) Inject(e *env, _ Planned, _ *state) (string, error) {
	e.writer.hold.Lock()
	defer e.writer.hold.Unlock()
	e.mu.Lock()
	t := e.table
	arch := fmt.Sprintf("%s_arch_%d", t, len(e.archives)+1)
	e.mu.Unlock()
	q := fmt.Sprintf("RENAME TABLE `%s` TO `%s`, `%s_new` TO `%s`", t, arch, t, t)
	if err := execAll(e.db, fmt.Sprintf("CREATE TABLE `%s_new` LIKE `%s`", t, t), q); err != nil {
		return "", err
	}
	e.mu.Lock()
	e.archives = append(e.archives, arch)
	e.mu.Unlock()
	return q, nil
}
func (rotation) Recover(*env, Planned, *state) (string, error) { return "", nil }

// requeue is the application putting SENT rows back to PENDING.
type requeue struct{}

func (requeue) Name() string                                  { return "requeue" }
func (requeue) Available(s *Schedule) bool                    { return s.Config.Status() }
func (requeue) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (requeue) Bound(*Schedule, Planned) int                  { return 0 }
func (requeue) Inject(e *env, p Planned, _ *state) (string, error) {
	later := p.Arg/64%4 == 0 // a quarter: for later
	n, err := e.writer.requeue(5+p.Arg%46, later)
	if err != nil {
		return "", err
	}
	if later {
		return fmt.Sprintf("%d SENT rows put back to PENDING for two hours on", n), nil
	}
	return fmt.Sprintf("%d SENT rows put back to PENDING with a new body", n), nil
}
func (requeue) Recover(*env, Planned, *state) (string, error) { return "", nil }

// configChange stops every relay (SIGKILL or SIGTERM, by the draw),
// changes one setting and starts them again: relay.lanes, the status
// table's statuses.publishable, or route.time_zone.
type configChange struct{}

func (configChange) Name() string                                  { return "config-change" }
func (configChange) Available(*Schedule) bool                      { return true }
func (configChange) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }

// variant is the setting changed and whether the relays are killed.
func (configChange) variant(s *Schedule, p Planned) (setting string, kill bool) {
	settings := []string{"lanes", "time_zone"}
	if s.Config.Status() {
		settings = append(settings, "publishable")
	}
	return settings[p.Arg%len(settings)], p.Arg/8%2 == 0
}

func (c configChange) Bound(s *Schedule, p Planned) int {
	setting, kill := c.variant(s, p)
	switch {
	case !kill:
		return 0 // a drained stop: nothing twice
	case s.Config.Stream && setting == "lanes":
		// Another seq_scope: the ids start above what the broker stored,
		// and the rows in flight are stored again (docs/lifecycle.md).
		return lanesBound(s)*brokerWindow + batchSize
	}
	return crashBound(s)
}

func (c configChange) Inject(e *env, p Planned, _ *state) (string, error) {
	setting, kill := c.variant(e.s, p)
	sig, how := syscall.SIGTERM, "SIGTERM"
	if kill {
		sig, how = syscall.SIGKILL, "SIGKILL"
	}
	// The standbys first, so none takes over with the old settings.
	l := e.leader()
	order := []int{}
	for i := range e.relays {
		if i != l {
			order = append(order, i)
		}
	}
	if l >= 0 {
		order = append(order, l)
	}
	for _, i := range order {
		r := e.relays[i]
		_ = r.proc.Cmd.Process.Signal(sig)
		if _, err := r.proc.Wait(45 * time.Second); err != nil {
			return "", fmt.Errorf("relay %d after %s: %w", i, how, err)
		}
	}
	e.mu.Lock()
	var change string
	switch setting {
	case "lanes":
		from := e.settings.Lanes
		if from == 2 {
			e.settings.Lanes = e.s.Config.Lanes()
		} else {
			e.settings.Lanes = 2
		}
		change = fmt.Sprintf("relay.lanes %d -> %d", from, e.settings.Lanes)
	case "time_zone":
		from := cmpOr(e.settings.TimeZone, "UTC")
		if e.settings.TimeZone == "" {
			e.settings.TimeZone = "Asia/Shanghai"
		} else {
			e.settings.TimeZone = ""
		}
		change = fmt.Sprintf("route.time_zone %s -> %s", from, cmpOr(e.settings.TimeZone, "UTC"))
	case "publishable":
		from := cmpOr(e.settings.Publishable, "the preset's PENDING, SENDING")
		if e.settings.Publishable == "" {
			e.settings.Publishable = "PENDING"
		} else {
			e.settings.Publishable = ""
		}
		change = fmt.Sprintf("statuses.publishable %s -> %s", from, cmpOr(e.settings.Publishable, "the preset's PENDING, SENDING"))
	}
	e.mu.Unlock()
	e.writeConfigs()
	for _, i := range order {
		e.startRelay(i)
	}
	return fmt.Sprintf("%s of every relay, %s, started again", how, change), nil
}
func (configChange) Recover(*env, Planned, *state) (string, error) { return "", nil }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// execAll runs statements on db one after another, each again after a
// deadlock (an online schema change tool retries its chunks so).
func execAll(db *sql.DB, qs ...string) error {
	for _, q := range qs {
		for try := 1; ; try++ {
			_, err := db.Exec(q)
			if err == nil {
				break
			}
			var me *mysql.MySQLError
			if errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) && try < 10 {
				time.Sleep(time.Duration(try) * 20 * time.Millisecond)
				continue
			}
			return fmt.Errorf("%.100s: %w", q, err)
		}
	}
	return nil
}

// killRedisAt SIGKILLs the Redis server at addr (its pid from INFO).
func killRedisAt(addr string) error {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "server").Result()
	if err != nil {
		return fmt.Errorf("INFO server on %s: %w", addr, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			var pid int
			if _, err := fmt.Sscan(v, &pid); err == nil {
				return syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return fmt.Errorf("no process_id in INFO server of %s", addr)
}

package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// The broker and Redis: reset, blackholed, stopped, failed over.

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

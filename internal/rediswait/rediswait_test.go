package rediswait_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/rediswait"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

var incr = redis.NewScript(`return redis.call('INCR', KEYS[1])`)

// WAIT counts the replicas that have the script's write: none on the
// stack's single Redis, at least one on its Sentinel group's master and on
// the master of a Cluster slot (found through the slot, not the pool).
func TestEvalThenWait(t *testing.T) {
	testenv.Integration(t)
	testenv.LockRedisTopologies(t) // no failover of another test binary meanwhile
	ctx := context.Background()
	master := func() redis.UniversalClient {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.RedisSentinelMaster, SentinelAddrs: testenv.RedisSentinelAddrs})
	}
	for _, tc := range []struct {
		name   string
		client func() redis.UniversalClient
		min    int64
	}{
		{"single", func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: testenv.RedisAddr}) }, 0},
		{"sentinel", master, 1},
		{"cluster", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs})
		}, 1},
	} {
		c := tc.client()
		key := "{" + testenv.UniqueName("wait") + "}:n"
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("%s: redis unreachable (scripts/stack.sh up): %v", tc.name, err)
		}
		res, acked, err := rediswait.Eval(ctx, c, incr, []string{key}, nil, 1, 200*time.Millisecond)
		if n, rerr := res.Int64(); rerr != nil || n != 1 || err != nil || acked < tc.min || acked > 2 {
			t.Errorf("%s: INCR %d (%v), acked %d (%v), want 1 and at least %d", tc.name, n, rerr, acked, err, tc.min)
		}
		c.Del(ctx, key)
		_ = c.Close()
	}
}

// A script that fails carries its error; WAIT still answers.
func TestEvalScriptError(t *testing.T) {
	testenv.Integration(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	defer c.Close()
	bad := redis.NewScript(`return redis.error_reply('no such thing')`)
	res, _, err := rediswait.Eval(ctx, c, bad, []string{"k"}, nil, 1, 50*time.Millisecond)
	if res.Err() == nil || !strings.Contains(res.Err().Error(), "no such thing") || err != nil {
		t.Fatalf("script error %v, WAIT error %v", res.Err(), err)
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	defer down.Close()
	if res, _, err := rediswait.Eval(ctx, down, bad, []string{"k"}, nil, 1, 50*time.Millisecond); res.Err() == nil || err == nil {
		t.Fatalf("nothing listening: script %v, WAIT %v; want both failed", res.Err(), err)
	}
}

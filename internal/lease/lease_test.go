package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/rediskey"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

func newLease(t *testing.T, rc *redis.Client, name, holder string, ttl time.Duration) *lease.Lease {
	t.Helper()
	l, err := lease.New(lease.Config{Name: name, Holder: holder, TTL: ttl}, rc, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func leaseName(t *testing.T) string {
	testenv.Integration(t)
	name := testenv.UniqueName("lease")
	rc := client(t, testenv.RedisAddr)
	if err := rc.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis is not reachable (run scripts/stack.sh up): %v", err)
	}
	t.Cleanup(func() { rc.Del(context.Background(), lease.LeaderKey(name), lease.TokenKey(name)) })
	return name
}

func acquireWithin(t *testing.T, l *lease.Lease, d time.Duration) (int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return l.Acquire(ctx)
}

// One holder at a time; a release hands over at once with a higher token.
func TestLeaseOneLeaderAndRelease(t *testing.T) {
	name := leaseName(t)
	rc := client(t, testenv.RedisAddr)
	a := newLease(t, rc, name, "a", 2*time.Second)
	b := newLease(t, rc, name, "b", 2*time.Second)
	ta, err := acquireWithin(t, a, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a.Held() != nil {
		t.Fatal("a does not count its fresh lease as held")
	}
	ctx, stop := context.WithCancel(context.Background())
	renewed := make(chan error, 1)
	go func() { renewed <- a.Run(ctx) }()
	// Three TTLs: a keeps renewing, b never gets in.
	if _, err := acquireWithin(t, b, 6*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b acquired while a renews: %v", err)
	}
	if a.Held() != nil {
		t.Fatal("a lost its lease while renewing")
	}
	if a.Leader() != "a" || b.Leader() != "a" {
		t.Fatalf("leader seen by a %q, by b %q; want a for both", a.Leader(), b.Leader())
	}
	stop()
	if err := <-renewed; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	a.Release(context.Background())
	start := time.Now()
	tb, err := acquireWithin(t, b, 2*time.Second)
	if err != nil {
		t.Fatalf("b did not take the released lease: %v", err)
	}
	if tb <= ta {
		t.Fatalf("token went from %d to %d, want it to grow", ta, tb)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("handover after release took %s", d)
	}
	if a.Held() == nil {
		t.Fatal("a still counts a released lease as held")
	}
	if a.Leader() != "" || b.Leader() != "b" {
		t.Fatalf("after the handover: leader seen by a %q, by b %q; want \"\" and b", a.Leader(), b.Leader())
	}
	if got, _ := rc.Get(context.Background(), lease.LeaderKey(name)).Result(); got != b.Value() {
		t.Fatalf("leader key %q, want %q", got, b.Value())
	}
}

// A leader that stops renewing (a dead or paused process) is replaced once
// the TTL runs out, and by its own clock it stops counting itself leader
// before that.
func TestLeaseTakeoverAfterExpiry(t *testing.T) {
	name := leaseName(t)
	rc := client(t, testenv.RedisAddr)
	a := newLease(t, rc, name, "a", time.Second)
	b := newLease(t, rc, name, "b", time.Second)
	if _, err := acquireWithin(t, a, time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := acquireWithin(t, b, 5*time.Second); err != nil {
		t.Fatalf("b never took over: %v", err)
	}
	waited := time.Since(start)
	if waited < 800*time.Millisecond {
		t.Fatalf("b took over after %s, before the 1s TTL ran out", waited)
	}
	if a.Held() == nil {
		t.Fatal("a still counts itself leader after its TTL")
	}
	// a wakes up (as after SIGCONT) and tries to renew: it learns it lost.
	if err := a.Run(context.Background()); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("a.Run: %v, want ErrLost", err)
	}
	select {
	case <-a.Lost():
	default:
		t.Fatal("Lost not closed")
	}
}

// A renewal that finds another holder ends the term at once.
func TestLeaseLostWhenTaken(t *testing.T) {
	name := leaseName(t)
	rc := client(t, testenv.RedisAddr)
	a := newLease(t, rc, name, "a", 3*time.Second)
	if _, err := acquireWithin(t, a, time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	rc.Set(context.Background(), lease.LeaderKey(name), "999:intruder", 0)
	if err := testenv.Receive(t, done, 3*time.Second, "a did not notice the lease was taken"); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Run: %v, want ErrLost", err)
	}
	if a.Held() == nil {
		t.Fatal("a still counts itself leader")
	}
	// Release must not delete the other holder's key.
	a.Release(context.Background())
	if got, _ := rc.Get(context.Background(), lease.LeaderKey(name)).Result(); got != "999:intruder" {
		t.Fatalf("release deleted another holder's lease: key is %q", got)
	}
}

// Redis unreachable: the leader steps down by its own clock, within the
// TTL, even though Redis would still say it leads.
func TestLeaseLostWhenRedisUnreachable(t *testing.T) {
	name := leaseName(t)
	px, err := faultproxy.Listen(testenv.RedisAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	rc := client(t, px.Addr())
	ttl := 2 * time.Second
	a := newLease(t, rc, name, "a", ttl)
	if _, err := acquireWithin(t, a, time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	px.Cut()
	start := time.Now()
	if err := testenv.Receive(t, done, 2*ttl, "leader kept its lease with redis unreachable"); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Run: %v, want ErrLost", err)
	}
	if d := time.Since(start); d > ttl {
		t.Fatalf("stepped down %s after the cut, later than the TTL %s", d, ttl)
	}
	px.Restore()
	// The key is still in Redis until its TTL: a standby waits for it, and
	// the old leader can take it back only with a new token.
	old := a.Token()
	if tok, err := acquireWithin(t, a, 2*time.Second); err != nil || tok <= old {
		t.Fatalf("re-acquire: token %d (was %d), %v", tok, old, err)
	}
}

// New refuses a TTL under 1s by its YAML key, before touching Redis.
func TestNewRefusesAShortTTL(t *testing.T) {
	_, err := lease.New(lease.Config{Name: "x", TTL: 500 * time.Millisecond}, nil, zaptest.NewLogger(t))
	if err == nil || !strings.Contains(err.Error(), "ha.lease_ttl: 500ms is under 1s") {
		t.Fatalf("error %v, want one naming ha.lease_ttl", err)
	}
}

// In Cluster mode the caller passes the hash-tagged key space; the lease
// lives under it and nowhere else.
func TestLeaseUnderTaggedKeys(t *testing.T) {
	name := leaseName(t)
	rc := client(t, testenv.RedisAddr)
	keys := rediskey.For(name, true)
	t.Cleanup(func() { rc.Del(context.Background(), keys.Leader(), keys.Token()) })
	l, err := lease.New(lease.Config{Name: name, Holder: "a", TTL: 2 * time.Second, Keys: keys}, rc, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquireWithin(t, l, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	ctx := context.Background()
	if got, _ := rc.Get(ctx, "binlog-relay:{"+name+"}:leader").Result(); got != l.Value() || l.LeaderKey() != keys.Leader() {
		t.Fatalf("tagged leader key holds %q (key %s), want %q", got, l.LeaderKey(), l.Value())
	}
	if n, _ := rc.Exists(ctx, lease.LeaderKey(name)).Result(); n != 0 {
		t.Fatalf("the untagged leader key exists too")
	}
	if l.Term().FenceKey() != keys.Leader() {
		t.Fatalf("fence key %s, want %s", l.Term().FenceKey(), keys.Leader())
	}
}

// With redis.wait_replicas the lease counts only once that many replicas
// have it: the stack's Redis has none, so every take is given back at once
// and the key is free afterwards, for another relay to try.
func TestLeaseWithoutEnoughReplicasIsNotTaken(t *testing.T) {
	name := leaseName(t)
	rc := client(t, testenv.RedisAddr)
	l, err := lease.New(lease.Config{Name: name, Holder: "a", TTL: 2 * time.Second, WaitReplicas: 1,
		WaitTimeout: 100 * time.Millisecond}, rc, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := acquireWithin(t, l, 1500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquired (token %d, %v) with no replica to acknowledge it", tok, err)
	}
	if l.Held() == nil {
		t.Fatal("Held after a lease no replica acknowledged")
	}
	ctx := context.Background()
	if v, err := rc.Get(ctx, lease.LeaderKey(name)).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("leader key left holding %q (%v)", v, err)
	}
	if n, _ := rc.Get(ctx, lease.TokenKey(name)).Int(); n < 2 {
		t.Fatalf("token counter %d: the lease was not tried again", n)
	}
}

// wait_timeout must leave a renewal time to finish before the next is due.
func TestNewRefusesAWaitOverTheRenewal(t *testing.T) {
	_, err := lease.New(lease.Config{Name: "x", TTL: 3 * time.Second, WaitReplicas: 1, WaitTimeout: time.Second}, nil, zaptest.NewLogger(t))
	if err == nil || !strings.Contains(err.Error(), "redis.wait_timeout: 1s must be positive and under the lease renewal period 1s") {
		t.Fatalf("error %v, want one naming redis.wait_timeout", err)
	}
	if _, err := lease.New(lease.Config{Name: "x", TTL: 3 * time.Second, WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond}, nil, zaptest.NewLogger(t)); err != nil {
		t.Fatal(err)
	}
}

package checkpoint_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

func cp(gtid string) checkpoint.Checkpoint {
	return checkpoint.Checkpoint{Flavor: "mariadb", GTIDSet: gtid, File: "binlog.000001", Pos: 4, SavedAt: time.Now().UTC()}
}

// A deposed leader's writes are refused, so the checkpoint moves neither
// back nor forward; the current leader's go through.
func TestFencedCheckpointWrites(t *testing.T) {
	testenv.Integration(t)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	t.Cleanup(func() { _ = rc.Close() })
	name := testenv.UniqueName("fence")
	key := "binlog-relay:" + name + ":checkpoint"
	t.Cleanup(func() { rc.Del(ctx, key, lease.LeaderKey(name), lease.TokenKey(name)) })
	newLease := func(holder string) *lease.Lease {
		l, err := lease.New(lease.Config{Name: name, Holder: holder, TTL: time.Second}, rc, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	store := func(l *lease.Lease) *checkpoint.Redis {
		return checkpoint.NewRedis(rc, key, checkpoint.WithFence(l.Term()))
	}
	a, b := newLease("a"), newLease("b")
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	sa := store(a)
	if err := sa.Save(ctx, cp("0-1-10")); err != nil {
		t.Fatalf("leader's save: %v", err)
	}
	// a stops renewing (paused); b takes over once the key expires.
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.Acquire(actx); err != nil {
		t.Fatal(err)
	}
	sb := store(b)
	if err := sb.Save(ctx, cp("0-1-20")); err != nil {
		t.Fatalf("new leader's save: %v", err)
	}
	for _, gtid := range []string{"0-1-15", "0-1-30"} { // back and forward
		if err := sa.Save(ctx, cp(gtid)); !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("deposed leader's save of %s: %v, want ErrFenced", gtid, err)
		}
	}
	got, err := sb.Load(ctx)
	if err != nil || got.GTIDSet != "0-1-20" {
		t.Fatalf("checkpoint %+v (%v), want the new leader's 0-1-20", got, err)
	}
	// The lease gone altogether (expired, nobody took it): nobody writes.
	rc.Del(ctx, lease.LeaderKey(name))
	if err := sb.Save(ctx, cp("0-1-40")); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("save without a lease in redis: %v, want ErrFenced", err)
	}
	if err := checkpoint.NewRedis(rc, key, checkpoint.WithFence(lease.TermOf(name, ""))).Save(ctx, cp("0-1-50")); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("save with no lease value: %v, want ErrFenced", err)
	}
	if got, _ := sb.Load(ctx); got.GTIDSet != "0-1-20" {
		t.Fatalf("checkpoint moved to %s", got.GTIDSet)
	}
}

package app

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/lease"
)

// The periodic reconciliation runs on the leader only: always without ha;
// with ha, only while this process holds the lease (not before its first
// term, not after losing it).
func TestReconcileRunsOnTheLeaderOnly(t *testing.T) {
	solo := &App{Cfg: &config.Config{}}
	if !holdsLease(solo.Cfg.HA.Enabled, solo.lease.Load()) {
		t.Fatal("a relay without ha does not count as its own leader")
	}
	a := &App{Cfg: &config.Config{Name: "t", HA: config.HA{Enabled: true}}}
	if holdsLease(a.Cfg.HA.Enabled, a.lease.Load()) {
		t.Fatal("leading before any lease exists")
	}
	if testing.Short() {
		return
	}
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rc.Close()
	name := "reconcile-leader-" + time.Now().Format("150405.000000")
	l, err := lease.New(lease.Config{Name: name, TTL: 2 * time.Second}, rc, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	a.lease.Store(l)
	if holdsLease(a.Cfg.HA.Enabled, a.lease.Load()) {
		t.Fatal("leading before the lease was acquired")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Acquire(ctx); err != nil {
		t.Fatalf("acquiring a lease in the stack's Redis (scripts/stack.sh up): %v", err)
	}
	defer rc.Del(context.Background(), lease.LeaderKey(name), lease.TokenKey(name))
	if !holdsLease(a.Cfg.HA.Enabled, a.lease.Load()) {
		t.Fatal("not leading while holding the lease")
	}
	l.Release(ctx)
	if holdsLease(a.Cfg.HA.Enabled, a.lease.Load()) {
		t.Fatal("still leading after the lease was released")
	}
}

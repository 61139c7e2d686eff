package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/rediskey"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// The roster lists the relays that announced themselves within RosterTTL,
// newest first, and forgets one that stopped.
func TestRosterListsLiveRelays(t *testing.T) {
	name := leaseName(t)
	rc := client(t, testenv.RedisAddr)
	keys := rediskey.For(name, false)
	ctx := context.Background()
	t.Cleanup(func() { rc.Del(ctx, keys.Relays()) })
	now := time.Now()
	for _, a := range []struct {
		holder string
		at     time.Time
	}{{"gone", now.Add(-lease.RosterTTL - time.Second)}, {"standby", now.Add(-time.Second)}, {"leader", now}} {
		if err := lease.Announce(ctx, rc, keys, a.holder, a.at); err != nil {
			t.Fatal(err)
		}
	}
	seen, err := lease.Roster(ctx, rc, keys, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0].Holder != "leader" || seen[1].Holder != "standby" {
		t.Fatalf("roster %+v, want leader then standby", seen)
	}
	if n, _ := rc.ZCard(ctx, keys.Relays()).Result(); n != 2 {
		t.Errorf("%d entries kept, want the stale one dropped", n)
	}
	if ttl, _ := rc.PTTL(ctx, keys.Relays()).Result(); ttl <= 0 || ttl > 2*lease.RosterTTL {
		t.Errorf("roster key TTL %s: it must expire when every relay is gone", ttl)
	}
}

package redisconn

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/config"
)

// redis: builds the client of its topology; a WAIT in a pipeline gets its
// timeout on top of the read timeout.
func TestNewRedisByTopology(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  config.Redis
		read time.Duration
		want string
	}{
		{"one", config.Redis{Addr: "127.0.0.1:6379"}, 3 * time.Second, "single"},
		{"sentinel", config.Redis{Addrs: []string{"127.0.0.1:26390", "127.0.0.1:26391"},
			Sentinel: config.Sentinel{MasterName: "m"}, WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond}, 3500 * time.Millisecond, "sentinel"},
		{"cluster", config.Redis{Addrs: []string{"127.0.0.1:7000"}, Cluster: true}, 3 * time.Second, "cluster"},
	} {
		c, err := New(tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got string
		var read time.Duration
		switch rc := c.(type) {
		case *redis.ClusterClient:
			got, read = "cluster", rc.Options().ReadTimeout
		case *redis.Client:
			// go-redis names a Sentinel-backed client's address so.
			got, read = "single", rc.Options().ReadTimeout
			if rc.Options().Addr == "FailoverClient" {
				got = "sentinel"
			}
		}
		if got != tc.want || read != tc.read {
			t.Errorf("%s: a %s client reading for %s, want %s and %s", tc.name, got, read, tc.want, tc.read)
		}
		_ = c.Close()
	}
}

// A checkpoint behind the one this relay saved last is told apart from one
// ahead of it (another leader's) and from one that cannot be compared.
// Saves short of their replicas make one line a minute, counting them.
func TestShortSavesLoggedOnceAMinute(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	s := &shortSaves{log: zap.New(core)}
	for range 5 {
		s.report(errors.New("0 of 1 replicas acknowledged"))
	}
	if logs.Len() != 1 || logs.All()[0].ContextMap()["short_saves"] != int64(1) {
		t.Fatalf("lines %d (%v), want one for the first", logs.Len(), logs.All())
	}
	s.last = time.Now().Add(-shortSavesEvery)
	s.report(errors.New("0 of 1 replicas acknowledged"))
	if logs.Len() != 2 || logs.All()[1].ContextMap()["short_saves"] != int64(5) {
		t.Fatalf("second line %v, want one counting the 5 since the first", logs.All())
	}
}

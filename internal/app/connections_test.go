package app

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
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
		c, err := newRedis(tc.cfg)
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
func TestCheckpointBehind(t *testing.T) {
	gtid := func(set string) checkpoint.Checkpoint { return checkpoint.Checkpoint{Flavor: "mariadb", GTIDSet: set} }
	file := func(server, f string, pos uint32) checkpoint.Checkpoint {
		return checkpoint.Checkpoint{Flavor: "mysql", File: f, Pos: pos, Server: server}
	}
	for _, tc := range []struct {
		name      string
		cp, saved checkpoint.Checkpoint
		want      bool
	}{
		{"same", gtid("0-1-10"), gtid("0-1-10"), false},
		{"lost a save", gtid("0-1-8"), gtid("0-1-10"), true},
		{"another leader went on", gtid("0-1-12"), gtid("0-1-10"), false},
		{"a domain missing", gtid("0-1-10"), gtid("0-1-10,1-1-3"), true},
		{"unparsable", gtid("nonsense"), gtid("0-1-10"), false},
		{"file and position, behind", file("s1", "binlog.000003", 400), file("s1", "binlog.000003", 900), true},
		{"an earlier file", file("s1", "binlog.000002", 9000), file("s1", "binlog.000003", 4), true},
		{"ahead", file("s1", "binlog.000004", 4), file("s1", "binlog.000003", 900), false},
		{"another server", file("s2", "binlog.000001", 4), file("s1", "binlog.000003", 900), false},
	} {
		if got := behind(tc.cp, tc.saved); got != tc.want {
			t.Errorf("%s: behind %v, want %v", tc.name, got, tc.want)
		}
	}
}

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

// redis.wait_timeout must leave a lease renewal time to finish, which only
// matters with ha.enabled; start-up and lint refuse it by its key.
func TestWaitTimeoutAgainstTheLease(t *testing.T) {
	const base = `name: r
source: {host: 127.0.0.1, user: relay}
primary: {host: 127.0.0.1, user: relay}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}
tables: [{preset: producer-message, schema: shop}]
redis: {wait_replicas: 1}
`
	for _, tc := range []struct {
		extra, want string
	}{
		{"ha: {enabled: true, lease_ttl: 3s}\n", "redis.wait_timeout: 1s must be positive and under the lease renewal period 1s"},
		{"ha: {enabled: true, lease_ttl: 3s}\nredis: {wait_replicas: 1, wait_timeout: 300ms}\n", ""},
		{"ha: {enabled: false, lease_ttl: 3s}\n", ""},
		{"ha: {enabled: true}\n", ""}, // 5s: renewed every 1.67s
	} {
		y := base + tc.extra
		if strings.Count(y, "redis:") > 1 {
			y = strings.Replace(y, "redis: {wait_replicas: 1}\n", "", 1)
		}
		cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("%q: %v", tc.extra, err)
		}
		_, err = newStages(cfg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.extra, err, tc.want)
		}
	}
}

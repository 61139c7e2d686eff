package app

import (
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

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

package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const redisBase = base + "tables: [{preset: producer-message, schema: shop}]\n"

// redis.addr, redis.addrs with sentinel: or cluster:, and the key names each
// topology gives the relay.
func TestRedisTopologies(t *testing.T) {
	for _, tc := range []struct {
		name, yaml         string
		servers            []string
		endpoint, ckpt, rk string
	}{
		{"default", "", []string{"127.0.0.1:6379"}, "127.0.0.1:6379",
			"binlog-relay:test-relay:checkpoint", "binlog-relay:test-relay:reconcile"},
		{"one address", `redis: {addr: "10.0.0.5:6380"}`, []string{"10.0.0.5:6380"}, "10.0.0.5:6380",
			"binlog-relay:test-relay:checkpoint", "binlog-relay:test-relay:reconcile"},
		{"one address as a list", `redis: {addrs: ["10.0.0.5:6380"]}`, []string{"10.0.0.5:6380"}, "",
			"binlog-relay:test-relay:checkpoint", "binlog-relay:test-relay:reconcile"},
		{"sentinel", `redis: {addrs: ["10.0.0.1:26379", "10.0.0.2:26379"], sentinel: {master_name: relay}}`,
			[]string{"10.0.0.1:26379", "10.0.0.2:26379"}, "sentinel relay via 10.0.0.1:26379,10.0.0.2:26379",
			"binlog-relay:test-relay:checkpoint", "binlog-relay:test-relay:reconcile"},
		{"cluster", `redis: {addrs: ["10.0.0.1:7000", "10.0.0.2:7000"], cluster: true}`,
			[]string{"10.0.0.1:7000", "10.0.0.2:7000"}, "cluster 10.0.0.1:7000,10.0.0.2:7000",
			"binlog-relay:{test-relay}:checkpoint", "binlog-relay:{test-relay}:reconcile"},
		{"cluster with a tagged key", "redis: {addrs: [\"10.0.0.1:7000\"], cluster: true}\ncheckpoint: {key: \"ck:{test-relay}\"}",
			[]string{"10.0.0.1:7000"}, "cluster 10.0.0.1:7000", "ck:{test-relay}", "binlog-relay:{test-relay}:reconcile"},
	} {
		c, err := parse(t, redisBase+tc.yaml+"\n", nil)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		got := []any{c.Redis.Servers(), c.Checkpoint.Key, c.Reconcile.Key, c.Redis.WaitTimeout}
		want := []any{tc.servers, tc.ckpt, tc.rk, time.Second}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: servers, checkpoint.key, reconcile.key, wait_timeout %v, want %v", tc.name, got, want)
		}
		if tc.endpoint != "" && c.Redis.Endpoint() != tc.endpoint {
			t.Errorf("%s: endpoint %q, want %q", tc.name, c.Redis.Endpoint(), tc.endpoint)
		}
	}
}

// Each mistake is named by its key; none quotes an address or a password.
func TestRedisMistakes(t *testing.T) {
	for _, tc := range []struct{ yaml, field string }{
		{`redis: {addr: "10.0.0.5:6379", addrs: ["10.0.0.6:6379"]}`, "redis.addr: set redis.addr (one Redis) or redis.addrs"},
		{`redis: {addr: "10.0.0.5"}`, "redis.addr: not host:port"},
		{`redis: {addrs: ["10.0.0.1:26379", "10.0.0.2"], sentinel: {master_name: m}}`, "redis.addrs[1]: not host:port"},
		{`redis: {addrs: ["10.0.0.1:6379", "10.0.0.2:6379"]}`, "redis.addrs: several addresses need redis.sentinel.master_name"},
		{`redis: {addrs: ["10.0.0.1:26379"], sentinel: {password: s3cr3t-sentinel}}`, "redis.sentinel.master_name: required"},
		{`redis: {addrs: ["10.0.0.1:7000"], cluster: true, sentinel: {master_name: m}}`, "redis.sentinel: redis.cluster is set too"},
		{`redis: {addrs: ["10.0.0.1:7000"], cluster: true, db: 2}`, "redis.db: a Redis Cluster has only database 0"},
		{`redis: {wait_replicas: -1}`, "redis.wait_replicas: -1 must be positive"},
		{`redis: {wait_timeout: -1s}`, "redis.wait_timeout: must be positive"},
		{`redis: {sentinel: {master_name: m, pasword: x}}`, "redis.sentinel.pasword: unknown key"},
		// The fenced save touches the leader key and the checkpoint in one
		// script: in Cluster mode they must share the name's hash tag.
		{"redis: {addrs: [\"10.0.0.1:7000\"], cluster: true}\ncheckpoint: {key: my-checkpoint}",
			"checkpoint.key: with redis.cluster it must carry the relay name as its hash tag, {test-relay} (the default is binlog-relay:{test-relay}:checkpoint)"},
		{"redis: {addrs: [\"10.0.0.1:7000\"], cluster: true}\ncheckpoint: {key: \"binlog-relay:{other}:checkpoint\"}",
			"checkpoint.key: with redis.cluster it must carry the relay name as its hash tag"},
	} {
		_, err := parse(t, redisBase+tc.yaml+"\n", nil)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %v, want one with %q", tc.yaml, err, tc.field)
			continue
		}
		for _, secret := range []string{"10.0.0", "s3cr3t-sentinel"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error shows %q: %v", tc.yaml, secret, err)
			}
		}
	}
}

// The Sentinels' password comes from its file, and an error elsewhere in
// the file never shows it.
func TestSentinelPasswordFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "sentinel-pw")
	if err := os.WriteFile(f, []byte("sentinel-secret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	y := redisBase + `redis:
  addrs: ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"]
  password: master-secret-2
  sentinel: {master_name: relay, username: sentinel-user, password_file: ` + f + `}
  wait_replicas: 1
  wait_timeout: 500ms
`
	c, err := parse(t, y, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Redis.Sentinel
	if s.Password != "sentinel-secret-1" || s.Username != "sentinel-user" || s.MasterName != "relay" ||
		c.Redis.Password != "master-secret-2" || c.Redis.WaitReplicas != 1 || c.Redis.WaitTimeout != 500*time.Millisecond {
		t.Fatalf("sentinel %+v, master password set %v, wait %d %s", s, c.Redis.Password != "", c.Redis.WaitReplicas, c.Redis.WaitTimeout)
	}
	// What an error is scrubbed of includes the password read from the
	// file (redact.go), as it does the master's.
	var r redactions
	if _, err := (&loader{}).parse([]byte(y), func(string) (string, bool) { return "", false }, &r); err != nil {
		t.Fatal(err)
	}
	if got := r.scrub(errors.New("x sentinel-secret-1 master-secret-2 y")).Error(); got != "x <redacted> <redacted> y" {
		t.Fatalf("scrubbed: %q", got)
	}
}

package rediskey_test

import (
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/rediskey"
)

// Outside Cluster the names are the ones deployments already have their
// checkpoints under; in Cluster mode every one carries the name as its hash
// tag, so all of them hash to the slot of the name.
func TestKeyNames(t *testing.T) {
	for _, tc := range []struct {
		cluster bool
		want    map[string]string
	}{
		{false, map[string]string{
			"leader": "binlog-relay:orders:leader", "token": "binlog-relay:orders:token",
			"checkpoint": "binlog-relay:orders:checkpoint", "instance": "binlog-relay:orders:instance",
			"reconcile": "binlog-relay:orders:reconcile", "replay": "binlog-relay:orders:replay:shop.outbox",
		}},
		{true, map[string]string{
			"leader": "binlog-relay:{orders}:leader", "token": "binlog-relay:{orders}:token",
			"checkpoint": "binlog-relay:{orders}:checkpoint", "instance": "binlog-relay:{orders}:instance",
			"reconcile": "binlog-relay:{orders}:reconcile", "replay": "binlog-relay:{orders}:replay:shop.outbox",
		}},
	} {
		s := rediskey.For("orders", tc.cluster)
		got := map[string]string{"leader": s.Leader(), "token": s.Token(), "checkpoint": s.Checkpoint(),
			"instance": s.Instance(), "reconcile": s.Reconcile(), "replay": s.Replay("shop.outbox")}
		for k, want := range tc.want {
			if got[k] != want {
				t.Errorf("cluster=%v %s: %q, want %q", tc.cluster, k, got[k], want)
			}
			tag := rediskey.HashTag(got[k])
			if tc.cluster && tag != "orders" || !tc.cluster && tag != "" {
				t.Errorf("cluster=%v %s: hash tag %q", tc.cluster, k, tag)
			}
		}
	}
}

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"binlog-relay:{orders}:checkpoint": "orders",
		"{orders}":                         "orders",
		"a{b}c{d}":                         "b", // the first tag only
		"a{}b{c}":                          "",  // an empty first tag: the whole key is hashed
		"a{b":                              "",
		"a}b{c}":                           "c",
		"plain":                            "",
		"{{x}}":                            "{x",
	} {
		if got := rediskey.HashTag(key); got != want {
			t.Errorf("HashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

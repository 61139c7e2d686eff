// Package rediskey names the Redis keys of one relay name. With one Redis
// or a Sentinel group they are binlog-relay:<name>:<what>, the names every
// existing deployment has its checkpoint under. With Redis Cluster the name
// is a hash tag, binlog-relay:{<name>}:<what>: Cluster hashes only the text
// between the braces, so every key of a relay lands in one slot and the Lua
// scripts that touch two of them (the lease: leader and token; the fenced
// checkpoint save: leader and checkpoint) run on one node instead of
// failing with CROSSSLOT.
//
// See the Cluster specification, "Hash tags":
// https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/#hash-tags
package rediskey

import "strings"

// Space is the key prefix of one relay name.
type Space struct{ prefix string }

// For is the key space of relays named name; cluster puts the name in a
// hash tag.
func For(name string, cluster bool) Space {
	if cluster {
		return Space{prefix: "binlog-relay:{" + name + "}"}
	}
	return Space{prefix: "binlog-relay:" + name}
}

// Prefix is "binlog-relay:<name>" or "binlog-relay:{<name>}".
func (s Space) Prefix() string { return s.prefix }

// IsZero reports whether s was never set.
func (s Space) IsZero() bool { return s.prefix == "" }

// Leader holds the leader lease, "token:holder" with a TTL.
func (s Space) Leader() string { return s.prefix + ":leader" }

// Token is the counter the lease's tokens are drawn from.
func (s Space) Token() string { return s.prefix + ":token" }

// Checkpoint is the default checkpoint.key.
func (s Space) Checkpoint() string { return s.prefix + ":checkpoint" }

// Instance holds the heartbeat of the relay running under the name.
func (s Space) Instance() string { return s.prefix + ":instance" }

// Relays is the sorted set of the relays of the name that are up (leader
// and standbys, by holder), scored by when each last said so.
func (s Space) Relays() string { return s.prefix + ":relays" }

// Reconcile is the default reconcile.key.
func (s Space) Reconcile() string { return s.prefix + ":reconcile" }

// Replay holds the progress of a replay of table (schema.table).
func (s Space) Replay(table string) string { return s.prefix + ":replay:" + table }

// HashTag is the part of key that Redis Cluster hashes when it is not the
// whole key: the text between the first '{' and the first '}' after it,
// when that text is not empty; "" when key has no such tag (the spec's
// rule: "{}" or an unclosed '{' hash the whole key).
func HashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

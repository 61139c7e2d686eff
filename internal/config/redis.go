package config

// `redis:` is one Redis (addr), a Sentinel group (addrs of the Sentinels and
// sentinel.master_name) or a Redis Cluster (addrs of some of its nodes and
// cluster: true). The choice names the relay's keys (internal/rediskey): in
// Cluster mode they carry the relay name as a hash tag, so checkpoint.key
// must too.

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/rediskey"
)

// Sentinel is `redis.sentinel:`: the name the Sentinels monitor the master
// under and the Sentinels' own credentials (redis.username and .password
// are the master's).
type Sentinel struct {
	MasterName   string `yaml:"master_name"`
	Username     string `yaml:"username"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
}

// Enabled reports whether the addresses are Sentinels.
func (s Sentinel) Enabled() bool { return s.MasterName != "" }

// Servers are the addresses to dial: redis.addrs, or redis.addr alone.
func (r Redis) Servers() []string {
	if len(r.Addrs) > 0 {
		return r.Addrs
	}
	return []string{r.Addr}
}

// Endpoint names the Redis for logs and messages: its address, "sentinel
// MASTER via ADDRS" or "cluster ADDRS".
func (r Redis) Endpoint() string {
	switch {
	case r.Cluster:
		return "cluster " + strings.Join(r.Servers(), ",")
	case r.Sentinel.Enabled():
		return "sentinel " + r.Sentinel.MasterName + " via " + strings.Join(r.Servers(), ",")
	}
	return r.Addr
}

// RedisKeys is the key space of the relay's name: binlog-relay:NAME, or
// binlog-relay:{NAME} with redis.cluster.
func (c *Config) RedisKeys() rediskey.Space { return rediskey.For(c.Name, c.Redis.Cluster) }

// DefaultWaitTimeout is redis.wait_timeout when unset.
const DefaultWaitTimeout = time.Second

func (r *Redis) defaults() {
	if len(r.Addrs) == 0 {
		r.Addr = cmp.Or(r.Addr, "127.0.0.1:6379")
	}
	r.WaitTimeout = cmp.Or(r.WaitTimeout, DefaultWaitTimeout)
}

// validateRedis checks `redis:` and the hash tag Cluster mode needs in
// checkpoint.key. No message quotes an address.
func (c *Config) validateRedis() []error {
	r := c.Redis
	var errs []error
	if r.Addr != "" && len(r.Addrs) > 0 {
		errs = append(errs, errors.New("redis.addr: set redis.addr (one Redis) or redis.addrs (Sentinels or Cluster nodes), not both"))
	} else if r.Addr != "" && !isHostPort(r.Addr) {
		errs = append(errs, errors.New("redis.addr: not host:port (a port from 1 to 65535)"))
	}
	for i, a := range r.Addrs {
		if !isHostPort(a) {
			errs = append(errs, fmt.Errorf("redis.addrs[%d]: not host:port (a port from 1 to 65535)", i))
		}
	}
	sentinelSet := r.Sentinel != Sentinel{}
	switch {
	case r.Cluster && sentinelSet:
		errs = append(errs, errors.New("redis.sentinel: redis.cluster is set too; a Redis Cluster fails over by itself, without Sentinels: set one of them"))
	case sentinelSet && r.Sentinel.MasterName == "":
		errs = append(errs, errors.New("redis.sentinel.master_name: required with redis.sentinel (the name the Sentinels monitor the master under)"))
	case !r.Cluster && !sentinelSet && len(r.Addrs) > 1:
		errs = append(errs, errors.New("redis.addrs: several addresses need redis.sentinel.master_name (they are Sentinels) or redis.cluster: true (they are Cluster nodes)"))
	}
	if r.Cluster && r.DB != 0 {
		errs = append(errs, errors.New("redis.db: a Redis Cluster has only database 0"))
	}
	if r.DB < 0 {
		errs = append(errs, fmt.Errorf("redis.db: %d must be positive", r.DB))
	}
	if r.WaitReplicas < 0 {
		errs = append(errs, fmt.Errorf("redis.wait_replicas: %d must be positive", r.WaitReplicas))
	}
	if r.WaitTimeout < 0 {
		errs = append(errs, errors.New("redis.wait_timeout: must be positive"))
	}
	if r.Cluster {
		if tag := rediskey.HashTag(c.Checkpoint.Key); tag != c.Name {
			// The fenced save (pkg/checkpoint) reads the leader key and writes
			// the checkpoint in one script: Cluster runs it only when both
			// hash to one slot.
			errs = append(errs, fmt.Errorf("checkpoint.key: with redis.cluster it must carry the relay name as its hash tag, {%s} (the default is %s), so that it and the leader key hash to one slot",
				c.Name, c.RedisKeys().Checkpoint()))
		}
	}
	return errs
}

// isHostPort reports whether s is host:port with a host and a port number.
func isHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

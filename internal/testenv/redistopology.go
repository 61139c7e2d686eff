package testenv

import "strings"

// The stack's Redis Sentinel group and Redis Cluster (scripts/stack.sh,
// "Redis Sentinel and Cluster"), whose nodes the topology tests kill; the
// stack's Redis on RedisAddr is never one of them.
var (
	// RedisSentinelAddrs are the Sentinels, RedisSentinelMaster the name
	// they monitor the master of 6390-6392 under.
	RedisSentinelAddrs  = strings.Split(Env("RELAY_TEST_REDIS_SENTINEL_ADDRS", "127.0.0.1:26390,127.0.0.1:26391,127.0.0.1:26392"), ",")
	RedisSentinelMaster = Env("RELAY_TEST_REDIS_SENTINEL_MASTER", "relay-sentinel")
	// RedisClusterAddrs are the six nodes of the Cluster: three masters,
	// one replica each.
	RedisClusterAddrs = strings.Split(Env("RELAY_TEST_REDIS_CLUSTER_ADDRS",
		"127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005"), ",")
)

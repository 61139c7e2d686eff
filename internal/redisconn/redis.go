// Package redisconn owns the relay's Redis client: one Redis, a Sentinel
// group's master or a Cluster (redis:), the lines go-redis logs, and the
// checkpoint store over it with the saves that fewer replicas than
// redis.wait_replicas acknowledged.
package redisconn

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/config"
)

// New builds the client for redis:. Sentinel: the Sentinels name the
// master, and the client asks them again when it fails (and on their
// +switch-master), so it follows a failover. Cluster: the client maps slots
// to nodes and follows MOVED redirects.
func New(c config.Redis) (redis.UniversalClient, error) {
	tc, err := c.TLS.TLSConfig("redis")
	if err != nil {
		return nil, err
	}
	const dial, write = 3 * time.Second, 3 * time.Second
	// One dial per attempt: the relay retries on its own schedule (the
	// lease every 250ms, the checkpoint every interval), and go-redis's
	// default of five dials 100ms apart to a master that died only delays
	// reaching the one a failover promoted.
	const dialRetries = 1
	read := 3 * time.Second
	if c.WaitReplicas > 0 {
		// WAIT shares a pipeline with its write, and a pipeline is read
		// with the client's timeout, not the command's own.
		read += c.WaitTimeout
	}
	switch {
	case c.Cluster:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Servers(), Username: c.Username,
			Password: c.Password, TLSConfig: tc, DialTimeout: dial, ReadTimeout: read, WriteTimeout: write,
			MaxRetries: 1, DialerRetries: dialRetries}), nil
	case c.Sentinel.Enabled():
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: c.Sentinel.MasterName,
			SentinelAddrs: c.Servers(), SentinelUsername: c.Sentinel.Username, SentinelPassword: c.Sentinel.Password,
			Username: c.Username, Password: c.Password, DB: c.DB, TLSConfig: tc,
			DialTimeout: dial, ReadTimeout: read, WriteTimeout: write, MaxRetries: 1, DialerRetries: dialRetries}), nil
	}
	return redis.NewClient(&redis.Options{Addr: c.Addr, Username: c.Username, Password: c.Password, DB: c.DB,
		TLSConfig: tc, DialTimeout: dial, ReadTimeout: read, WriteTimeout: write, MaxRetries: 1,
		DialerRetries: dialRetries}), nil
}

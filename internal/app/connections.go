package app

// Connections: the source and primary pools, the Redis client (one Redis,
// a Sentinel group or a Cluster) and the checkpoint store (opening dials
// nothing; the first use does), and what
// the relay reads off the servers before streaming: the source's flavor and
// identity, its binlog position, where to start, the primary's GTID
// position.

import (
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// Open prepares connections; nothing is dialled until used.
func Open(cfg *config.Config, log *zap.Logger) (*App, error) {
	st, err := newStages(cfg) // stages.go
	if err != nil {
		return nil, err
	}
	a := &App{Cfg: cfg, Log: log, stages: st}
	routeRedisLogs(log)
	if a.Source, err = source.Open(cfg.Source, log.Named("source")); err != nil {
		return nil, err
	}
	if a.Primary, err = source.OpenDB(cfg.Primary, "primary"); err != nil {
		return nil, err
	}
	a.Primary.SetMaxOpenConns(8)
	a.Primary.SetConnMaxIdleTime(5 * time.Minute)
	if a.Redis, err = newRedis(cfg.Redis); err != nil {
		return nil, err
	}
	a.waitLog = &shortSaves{log: log}
	a.Store = a.checkpointStore()
	return a, nil
}

// newRedis builds the client for redis:. Sentinel: the Sentinels name the
// master, and the client asks them again when it fails (and on their
// +switch-master), so it follows a failover. Cluster: the client maps slots
// to nodes and follows MOVED redirects.
func newRedis(c config.Redis) (redis.UniversalClient, error) {
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

// checkpointStore is the checkpoint in Redis under checkpoint.key, with
// redis.wait_replicas applied to every save.
func (a *App) checkpointStore(opts ...checkpoint.RedisOption) *checkpoint.Redis {
	if r := a.Cfg.Redis; r.WaitReplicas > 0 {
		opts = append(opts, checkpoint.WithWait(r.WaitReplicas, r.WaitTimeout, a.waitLog.report))
	}
	return checkpoint.NewRedis(a.Redis, a.Cfg.Checkpoint.Key, opts...)
}

// shortSaves logs the checkpoint saves that fewer replicas than
// redis.wait_replicas acknowledged: at most one line a minute, with how
// many there were. Such a save still counts: the master has it, and losing
// it in a failover only replays from the one before.
type shortSaves struct {
	log    *zap.Logger
	mu     sync.Mutex
	last   time.Time
	missed int
}

// shortSavesEvery spaces the lines: a save is due every checkpoint.interval.
const shortSavesEvery = time.Minute

func (s *shortSaves) report(err error) {
	s.mu.Lock()
	s.missed++
	if time.Since(s.last) < shortSavesEvery {
		s.mu.Unlock()
		return
	}
	n := s.missed
	s.last, s.missed = time.Now(), 0
	s.mu.Unlock()
	s.log.Warn("checkpoint saved but not acknowledged by enough redis replicas: a failover now could lose it (the relay would replay from an earlier one: duplicates, no loss)",
		zap.Error(err), zap.Int("short_saves", n))
}

// Close releases the connections.
func (a *App) Close() {
	_ = a.Source.Close()
	_ = a.Primary.Close()
	_ = a.Redis.Close()
}

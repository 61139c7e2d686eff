package redisconn

import (
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// Checkpoints makes the checkpoint stores of one relay: its checkpoint in
// Redis under checkpoint.key, with redis.wait_replicas applied to every
// save.
type Checkpoints struct {
	client redis.UniversalClient
	cfg    config.Redis
	key    string
	short  *shortSaves
}

// NewCheckpoints is the checkpoint stores under key in client; log gets
// the saves short of redis.wait_replicas.
func NewCheckpoints(client redis.UniversalClient, cfg config.Redis, key string, log *zap.Logger) *Checkpoints {
	return &Checkpoints{client: client, cfg: cfg, key: key, short: &shortSaves{log: log}}
}

// Store is the checkpoint store, with opts (a lease's fence).
func (c *Checkpoints) Store(opts ...checkpoint.RedisOption) *checkpoint.Redis {
	if c.cfg.WaitReplicas > 0 {
		opts = append(opts, checkpoint.WithWait(c.cfg.WaitReplicas, c.cfg.WaitTimeout, c.short.report))
	}
	return checkpoint.NewRedis(c.client, c.key, opts...)
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

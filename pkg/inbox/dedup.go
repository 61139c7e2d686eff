package inbox

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DedupStore is the optional fast path in front of the database. A marker is written
// only after a SUCCESS row committed, so "seen" always means "done": skipping the
// database on a hit can never lose a message. A miss, an error or an expired marker
// just falls through to the database, which stays the source of truth.
type DedupStore interface {
	// Seen reports whether key carries a done marker.
	Seen(ctx context.Context, key string) (bool, error)
	// MarkDone writes the marker if it is absent (SETNX) with a time to live.
	MarkDone(ctx context.Context, key string, ttl time.Duration) error
}

// RedisDedup is a DedupStore on Redis (single node, Sentinel or Cluster).
type RedisDedup struct {
	client redis.UniversalClient
}

// NewRedisDedup returns a DedupStore using client.
func NewRedisDedup(client redis.UniversalClient) *RedisDedup {
	return &RedisDedup{client: client}
}

// Seen implements DedupStore.
func (r *RedisDedup) Seen(ctx context.Context, key string) (bool, error) {
	n, err := r.client.Exists(ctx, key).Result()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// MarkDone implements DedupStore.
func (r *RedisDedup) MarkDone(ctx context.Context, key string, ttl time.Duration) error {
	return r.client.SetNX(ctx, key, "1", ttl).Err()
}

// dedupPause is how long the fast path is skipped after a Redis error, so an outage
// costs one timeout per pause rather than one per message.
const dedupPause = 5 * time.Second

// dedupGuard wraps a DedupStore with timeouts and a pause after errors. A nil guard is
// a disabled fast path.
type dedupGuard struct {
	store    DedupStore
	prefix   string
	consumer string
	ttl      time.Duration
	timeout  time.Duration
	log      *slog.Logger

	pausedUntil atomic.Int64 // unix nanoseconds
}

func newDedupGuard(store DedupStore, cfg Config, log *slog.Logger) *dedupGuard {
	if store == nil {
		return nil
	}
	return &dedupGuard{
		store: store, prefix: cfg.DedupKeyPrefix, consumer: cfg.ConsumerName,
		ttl: cfg.DedupTTL, timeout: cfg.DedupTimeout, log: log,
	}
}

func (g *dedupGuard) key(messageID string) string {
	return g.prefix + g.consumer + ":" + messageID
}

func (g *dedupGuard) seen(ctx context.Context, messageID string) bool {
	if g == nil || g.paused() {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	ok, err := g.store.Seen(cctx, g.key(messageID))
	if err != nil {
		g.fail(ctx, err)
		return false
	}
	return ok
}

func (g *dedupGuard) markDone(ctx context.Context, messageID string) {
	if g == nil || g.paused() {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if err := g.store.MarkDone(cctx, g.key(messageID), g.ttl); err != nil {
		g.fail(ctx, err)
	}
}

func (g *dedupGuard) paused() bool {
	return time.Now().UnixNano() < g.pausedUntil.Load()
}

func (g *dedupGuard) fail(ctx context.Context, err error) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return // our own shutdown, not a Redis problem
	}
	until := time.Now().Add(dedupPause).UnixNano()
	prev := g.pausedUntil.Load()
	if g.pausedUntil.CompareAndSwap(prev, until) && prev < time.Now().UnixNano() {
		g.log.Warn("redis dedup fast path unavailable; using the database alone",
			slog.Duration("pause", dedupPause), slog.Any("error", err))
	}
}

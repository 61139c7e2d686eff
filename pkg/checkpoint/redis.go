package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/rediswait"
)

// ErrFenced means a fenced save was refused because the writer no longer
// holds the lease its Fence names. It never succeeds on retry: the writer
// must stop writing.
var ErrFenced = errors.New("checkpoint write fenced: this writer no longer holds the leader lease")

// Fence is a leader lease as a fenced save checks it: Save writes only while
// the Redis key FenceKey holds the value FenceToken. The relay's own lease
// gives every term a new token ("token:holder"), so a deposed leader (paused
// past its lease, cut off from Redis, slow to notice) can move the checkpoint
// neither back nor forward, and neither can the same process with an old
// term's token.
type Fence interface {
	// FenceKey is the Redis key holding the current leader's token.
	FenceKey() string
	// FenceToken is this writer's token; "" means it holds no lease, and
	// every save is then refused.
	FenceToken() string
}

// Redis stores the checkpoint as JSON under one key. Build it with NewRedis.
type Redis struct {
	client redis.UniversalClient
	key    string
	fence  Fence

	waitReplicas int
	waitTimeout  time.Duration
	onShort      func(error)
}

// A RedisOption configures a Redis store.
type RedisOption func(*Redis)

// WithFence makes every Save conditional on f: the check and the write run
// in one Lua script, so nothing can come between them. With Redis Cluster
// the checkpoint key and f.FenceKey() must hash to one slot: give both the
// same hash tag ("binlog-relay:{orders}:checkpoint").
func WithFence(f Fence) RedisOption { return func(r *Redis) { r.fence = f } }

// WithWait makes every Save WAIT, on the connection it wrote on, until
// replicas replicas acknowledged the write or timeout passed. Redis
// replicates asynchronously: without it a failover can promote a replica
// that never got the last save, and the checkpoint goes back (a replay:
// duplicates, never a loss). Fewer acknowledgements do not fail the save,
// which the master holds: onShort (may be nil) is told how many there were.
func WithWait(replicas int, timeout time.Duration, onShort func(error)) RedisOption {
	return func(r *Redis) { r.waitReplicas, r.waitTimeout, r.onShort = replicas, timeout, onShort }
}

// NewRedis returns a store keeping the checkpoint under key. client may be
// a *redis.Client, a failover (Sentinel) client or a cluster client.
func NewRedis(client redis.UniversalClient, key string, opts ...RedisOption) *Redis {
	r := &Redis{client: client, key: key}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Key is the Redis key the checkpoint is stored under.
func (r *Redis) Key() string { return r.key }

// Load returns the saved checkpoint or ErrNotFound; reading needs no fence.
func (r *Redis) Load(ctx context.Context) (Checkpoint, error) {
	b, err := r.client.Get(ctx, r.key).Bytes()
	if errors.Is(err, redis.Nil) {
		return Checkpoint{}, ErrNotFound
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("loading checkpoint %q from redis: %w", r.key, err)
	}
	return Decode(b)
}

// KEYS[1] checkpoint; ARGV[1] checkpoint. A SET that can share a pipeline
// with WAIT on one cluster node (rediswait).
var plainSave = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

// KEYS[1] fence, KEYS[2] checkpoint; ARGV[1] token, ARGV[2] checkpoint.
var fencedSave = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1`)

// Save writes the checkpoint. With a fence it returns ErrFenced, and writes
// nothing, unless the fence key still holds this writer's token.
func (r *Redis) Save(ctx context.Context, c Checkpoint) error {
	b, err := c.Encode()
	if err != nil {
		return err
	}
	if r.fence == nil && r.waitReplicas == 0 {
		if err := r.client.Set(ctx, r.key, b, 0).Err(); err != nil {
			return fmt.Errorf("saving checkpoint %q to redis: %w", r.key, err)
		}
		return nil
	}
	if r.fence == nil {
		_, err := r.eval(ctx, plainSave, []string{r.key}, b).Result()
		if err != nil {
			return fmt.Errorf("saving checkpoint %q to redis: %w", r.key, err)
		}
		return nil
	}
	token := r.fence.FenceToken()
	if token == "" {
		return ErrFenced
	}
	n, err := r.eval(ctx, fencedSave, []string{r.fence.FenceKey(), r.key}, token, b).Int64()
	if err != nil {
		return fmt.Errorf("saving checkpoint %q to redis: %w", r.key, err)
	}
	if n != 1 {
		return fmt.Errorf("%w (token %s, key %s)", ErrFenced, token, r.fence.FenceKey())
	}
	return nil
}

// eval runs a save script, then WAIT when the store was built WithWait.
func (r *Redis) eval(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if r.waitReplicas == 0 {
		return s.Run(ctx, r.client, keys, args...)
	}
	res, acked, err := rediswait.Eval(ctx, r.client, s, keys, args, r.waitReplicas, r.waitTimeout)
	written := res.Err() == nil && !(s == fencedSave && res.Val() != int64(1))
	if written && r.onShort != nil {
		switch {
		case err != nil:
			r.onShort(fmt.Errorf("checkpoint %q saved; WAIT for %d replicas failed: %w", r.key, r.waitReplicas, err))
		case acked < int64(r.waitReplicas):
			r.onShort(fmt.Errorf("checkpoint %q saved; %d of %d replicas acknowledged within %s", r.key, acked, r.waitReplicas, r.waitTimeout))
		}
	}
	return res
}

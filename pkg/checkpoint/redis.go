package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
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
}

// A RedisOption configures a Redis store.
type RedisOption func(*Redis)

// WithFence makes every Save conditional on f: the check and the write run
// in one Lua script, so nothing can come between them. With Redis Cluster
// the checkpoint key and f.FenceKey() must hash to one slot: give both the
// same hash tag ("binlog-relay:{orders}:checkpoint").
func WithFence(f Fence) RedisOption { return func(r *Redis) { r.fence = f } }

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
	if r.fence == nil {
		if err := r.client.Set(ctx, r.key, b, 0).Err(); err != nil {
			return fmt.Errorf("saving checkpoint %q to redis: %w", r.key, err)
		}
		return nil
	}
	token := r.fence.FenceToken()
	if token == "" {
		return ErrFenced
	}
	n, err := fencedSave.Run(ctx, r.client, []string{r.fence.FenceKey(), r.key}, token, b).Int64()
	if err != nil {
		return fmt.Errorf("saving checkpoint %q to redis: %w", r.key, err)
	}
	if n != 1 {
		return fmt.Errorf("%w (token %s, key %s)", ErrFenced, token, r.fence.FenceKey())
	}
	return nil
}

package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Redis stores the checkpoint as JSON under one key.
type Redis struct {
	Client *redis.Client
	Key    string
}

// Load returns the saved checkpoint or ErrNotFound.
func (r *Redis) Load(ctx context.Context) (Checkpoint, error) {
	b, err := r.Client.Get(ctx, r.Key).Bytes()
	if errors.Is(err, redis.Nil) {
		return Checkpoint{}, ErrNotFound
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("loading checkpoint %q from redis: %w", r.Key, err)
	}
	return Decode(b)
}

// Save writes the checkpoint.
func (r *Redis) Save(ctx context.Context, c Checkpoint) error {
	b, err := c.Encode()
	if err != nil {
		return err
	}
	if err := r.Client.Set(ctx, r.Key, b, 0).Err(); err != nil {
		return fmt.Errorf("saving checkpoint %q to redis: %w", r.Key, err)
	}
	return nil
}

package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrNoResult means no run has saved a result under the key yet.
var ErrNoResult = errors.New("no reconciliation result saved")

// Store keeps the last run's report in Redis, for `binlog-relay status`
// (its ids are capped at reconcile.max_ids, so it stays small).
type Store struct {
	Client redis.Cmdable
	Key    string
}

// Save replaces the saved report.
func (s Store) Save(ctx context.Context, r *Report) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := s.Client.Set(ctx, s.Key, b, 0).Err(); err != nil {
		return fmt.Errorf("saving the reconciliation result to redis: %w", err)
	}
	return nil
}

// Load reads the saved report.
func (s Store) Load(ctx context.Context) (*Report, error) {
	b, err := s.Client.Get(ctx, s.Key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNoResult
	}
	if err != nil {
		return nil, fmt.Errorf("reading the reconciliation result from redis: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("reading the reconciliation result under %s: %w", s.Key, err)
	}
	return &r, nil
}

package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// State is a replay's progress, saved so that `replay --resume` continues
// where an interrupted run stopped. Cursor is the highest id below which
// every row is settled (confirmed by the broker, or failed and counted):
// results arrive in publish order, so it only moves over a contiguous
// prefix, and a resumed run sends nothing twice.
type State struct {
	ID         string    `json:"id"` // the x-relay-replay header's value
	Table      string    `json:"table"`
	Source     string    `json:"source"` // the table read: the live one or the archive
	Since      time.Time `json:"since,omitzero"`
	Until      time.Time `json:"until,omitzero"`
	IDs        *IDRange  `json:"ids,omitempty"`
	Where      []Cond    `json:"where,omitempty"`
	Exchange   string    `json:"exchange,omitempty"`
	RoutingKey string    `json:"routing_key,omitempty"`
	// MaxID fixes the set at the first run: rows marked SENT later are not
	// part of this replay.
	MaxID     string    `json:"max_id"`
	Cursor    string    `json:"cursor,omitempty"`
	Total     int64     `json:"total"`
	Published int64     `json:"published"`
	Failed    int64     `json:"failed"`
	Started   time.Time `json:"started"`
	Saved     time.Time `json:"saved"`
}

// Range is the saved range.
func (s *State) Range() Range {
	return Range{Since: s.Since, Until: s.Until, IDs: s.IDs, Where: s.Where}
}

// Store keeps one replay's progress.
type Store interface {
	Load(ctx context.Context) (*State, error)
	Save(ctx context.Context, s *State) error
	Delete(ctx context.Context) error
}

// ErrNoProgress: no replay was saved under the key.
var ErrNoProgress = errors.New("no saved replay")

// RedisStore keeps the progress as JSON under one key.
type RedisStore struct {
	rdb redis.Cmdable
	key string
}

// NewRedisStore stores progress under key; rdb is any client (one Redis,
// Sentinel, Cluster: the progress is one key).
func NewRedisStore(rdb redis.Cmdable, key string) *RedisStore { return &RedisStore{rdb: rdb, key: key} }

// Key is where the progress is kept.
func (r *RedisStore) Key() string { return r.key }

// Load reads the saved progress, ErrNoProgress when there is none.
func (r *RedisStore) Load(ctx context.Context) (*State, error) {
	b, err := r.rdb.Get(ctx, r.key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNoProgress
	}
	if err != nil {
		return nil, fmt.Errorf("reading the replay's progress (%s): %w", r.key, err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("the replay's progress under %s does not parse (delete the key to start over): %w", r.key, err)
	}
	return &s, nil
}

// Save writes the progress.
func (r *RedisStore) Save(ctx context.Context, s *State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := r.rdb.Set(ctx, r.key, b, 0).Err(); err != nil {
		return fmt.Errorf("saving the replay's progress (%s): %w", r.key, err)
	}
	return nil
}

// Delete drops the progress of a finished replay.
func (r *RedisStore) Delete(ctx context.Context) error {
	if err := r.rdb.Del(ctx, r.key).Err(); err != nil {
		return fmt.Errorf("deleting the replay's progress (%s): %w", r.key, err)
	}
	return nil
}

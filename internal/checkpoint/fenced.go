package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrFenced means the write was refused because the writer no longer holds
// the leader lease. It never succeeds on retry: the writer must stop.
var ErrFenced = errors.New("checkpoint write fenced: this relay no longer holds the leader lease")

// Fenced is a leader's checkpoint store. Save writes only while the leader
// key still holds this leader's lease value ("token:holder", see internal/lease),
// checked and written in one Lua script, so nothing can come between the
// check and the write. A deposed leader (paused past its lease, cut off from
// Redis, or slow to notice) can then move the checkpoint neither back nor
// forward; a new term always has a new token, so even the same process in a
// later term cannot write with an old one.
//
// With Redis Cluster both keys must hash to one slot: give checkpoint.key
// the relay name as a hash tag.
type Fenced struct {
	Client    *redis.Client
	Key       string // the checkpoint
	LeaderKey string // internal/lease.LeaderKey(name)
	Lease     string // this leader's lease value, internal/lease.Lease.Value()
}

// KEYS[1] leader, KEYS[2] checkpoint; ARGV[1] lease value, ARGV[2] checkpoint.
var fencedSave = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1`)

// Load returns the saved checkpoint or ErrNotFound; reading needs no fence.
func (f *Fenced) Load(ctx context.Context) (Checkpoint, error) {
	return (&Redis{Client: f.Client, Key: f.Key}).Load(ctx)
}

// Save writes the checkpoint if this leader still holds the lease, and
// returns ErrFenced if not.
func (f *Fenced) Save(ctx context.Context, c Checkpoint) error {
	if f.Lease == "" {
		return ErrFenced
	}
	b, err := c.Encode()
	if err != nil {
		return err
	}
	n, err := fencedSave.Run(ctx, f.Client, []string{f.LeaderKey, f.Key}, f.Lease, b).Int64()
	if err != nil {
		return fmt.Errorf("saving checkpoint %q to redis: %w", f.Key, err)
	}
	if n != 1 {
		return fmt.Errorf("%w (lease %s, key %s)", ErrFenced, f.Lease, f.LeaderKey)
	}
	return nil
}

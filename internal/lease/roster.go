package lease

// The roster: which relays of a name are up, the leader and its standbys.
// The lease itself names only the leader; a standby only polls. So each
// relay with ha.enabled and the console on adds its holder to a sorted set,
// scored by the time, every RosterEvery, and the console lists the ones
// seen within RosterTTL.

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/rediskey"
)

// RosterEvery spaces a relay's roster writes; RosterTTL is how long after
// its last one a relay is still listed.
const (
	RosterEvery = 5 * time.Second
	RosterTTL   = 3 * RosterEvery
)

// Seen is one relay of the roster.
type Seen struct {
	Holder string
	At     time.Time
}

// Announce adds holder to the roster of keys now, drops the entries older
// than RosterTTL, and lets the key expire when every relay is gone.
func Announce(ctx context.Context, rc redis.UniversalClient, keys rediskey.Space, holder string, now time.Time) error {
	key := keys.Relays()
	_, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMilli()), Member: holder})
		p.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(now.Add(-RosterTTL).UnixMilli(), 10))
		p.PExpire(ctx, key, 2*RosterTTL)
		return nil
	})
	return err
}

// Roster lists the relays seen within RosterTTL of now, most recent first.
func Roster(ctx context.Context, rc redis.UniversalClient, keys rediskey.Space, now time.Time) ([]Seen, error) {
	zs, err := rc.ZRevRangeByScoreWithScores(ctx, keys.Relays(), &redis.ZRangeBy{
		Min: strconv.FormatInt(now.Add(-RosterTTL).UnixMilli(), 10), Max: "+inf", Count: 100}).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Seen, 0, len(zs))
	for _, z := range zs {
		h, _ := z.Member.(string)
		out = append(out, Seen{Holder: h, At: time.UnixMilli(int64(z.Score))})
	}
	return out, nil
}

// RunRoster announces holder every RosterEvery until ctx ends; a failed
// write is tried again at the next tick (the roster is for people, the
// lease does not depend on it).
func RunRoster(ctx context.Context, rc redis.UniversalClient, keys rediskey.Space, holder func() string) {
	tick := time.NewTicker(RosterEvery)
	defer tick.Stop()
	for {
		if h := holder(); h != "" {
			wctx, cancel := context.WithTimeout(ctx, RosterEvery)
			_ = Announce(wctx, rc, keys, h, time.Now())
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Package lease elects one leader among relays that share a name, with a
// lease in Redis. The leader key holds "token:holder" with a TTL; taking it
// draws a new token from a counter (INCR), so every term has a higher token
// than the one before. The leader renews it every third of the TTL with a
// compare-and-set on its own value; standbys poll until the key is free.
//
// A leader trusts its own clock, not Redis: it counts its lease as held only
// until 90% of the TTL after the last renewal it sent. A leader that cannot
// renew (Redis unreachable, or the process paused by SIGSTOP, a long GC or a
// frozen VM) therefore calls itself deposed before Redis lets the key expire
// and a standby can take it. Clocks may still lie, so the token also fences
// every checkpoint write (checkpoint.WithFence with Lease.Term): a deposed leader that
// did not notice cannot move the checkpoint.
//
// With WaitReplicas, a term counts only once that many replicas acknowledged
// taking the lease, and a renewal only once they acknowledged it: Redis
// replicates asynchronously, and a failover to a replica that missed the
// write would otherwise hand the lease to a second relay while the first
// still counts it as its own (docs/ha.md, "Redis failover").
//
// See "Distributed locks with Redis" (redis.io/docs/latest/develop/use/patterns/distributed-locks/)
// and Kleppmann's "How to do distributed locking" for why the token is needed
// on top of the TTL.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/rediskey"
	"github.com/binlog-relay/binlog-relay/internal/rediswait"
)

// ErrLost means this process no longer holds the lease: it expired by its
// own clock, or Redis names another holder.
var ErrLost = errors.New("leader lease lost")

// Config names the lease and sets its timing.
type Config struct {
	// Name is the relay name.
	Name string
	// Keys names the leader key and the token counter; default
	// rediskey.For(Name, false): binlog-relay:<name>:leader and :token (in
	// Cluster mode the caller passes the hash-tagged space).
	Keys rediskey.Space
	// Holder identifies this process in the leader key; default
	// hostname-pid-random. It must be unique among the relays.
	Holder string
	// TTL is how long the lease lives in Redis without a renewal, so how
	// long a standby waits after the leader dies. Default 5s.
	TTL time.Duration
	// RenewEvery is the renewal period; default TTL/3.
	RenewEvery time.Duration
	// PollEvery is how often a standby tries to take the lease; default
	// TTL/10, at least 100ms.
	PollEvery time.Duration
	// WaitReplicas, above 0, is how many replicas must acknowledge taking
	// or renewing the lease, within WaitTimeout, for it to count
	// (redis.wait_replicas). A lease taken without them is released at
	// once and taken again later; a renewal without them is retried like a
	// failed one.
	WaitReplicas int
	// WaitTimeout bounds each WAIT; default 1s. Under RenewEvery.
	WaitTimeout time.Duration
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.TTL == 0 {
		c.TTL = 5 * time.Second
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL / 3
	}
	if c.PollEvery == 0 {
		c.PollEvery = max(c.TTL/10, 100*time.Millisecond)
	}
	if c.Keys.IsZero() {
		c.Keys = rediskey.For(c.Name, false)
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = time.Second
	}
	if c.Holder == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Holder = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
}

// Validate names the field at fault.
func (c *Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("name: required for the leader lease")
	case c.TTL < time.Second:
		return fmt.Errorf("ha.lease_ttl: %s is under 1s", c.TTL)
	case c.RenewEvery <= 0 || c.RenewEvery >= c.TTL*9/10:
		return fmt.Errorf("ha: renewal period %s must be positive and well under the lease TTL %s", c.RenewEvery, c.TTL)
	case c.WaitReplicas < 0:
		return fmt.Errorf("redis.wait_replicas: %d must be positive", c.WaitReplicas)
	case c.WaitReplicas > 0 && (c.WaitTimeout <= 0 || c.WaitTimeout >= c.RenewEvery):
		// A renewal waits this long at worst, and must be done before the
		// next one is due.
		return fmt.Errorf("redis.wait_timeout: %s must be positive and under the lease renewal period %s (ha.lease_ttl / 3)", c.WaitTimeout, c.RenewEvery)
	}
	return nil
}

// LeaderKey is the Redis key holding the current leader's "token:holder"
// outside Redis Cluster (rediskey.Space.Leader in general).
func LeaderKey(name string) string { return rediskey.For(name, false).Leader() }

// TokenKey is the Redis counter the tokens are drawn from outside Redis
// Cluster (rediskey.Space.Token in general).
func TokenKey(name string) string { return rediskey.For(name, false).Token() }

// validFraction: a leader counts its lease as held for this share of the TTL
// after the renewal it sent, so it steps down before Redis lets a standby in
// (the rest covers clock rate differences and the time to stop publishing).
const validFraction = 0.9

var (
	// KEYS[1] leader, KEYS[2] token counter; ARGV[1] holder, ARGV[2] TTL ms.
	// Free, or held by this very holder (a term it gave up on): take it with
	// a new token. Otherwise return the current value.
	acquireScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local holder = string.match(cur, '^%d+:(.*)$')
  if holder ~= ARGV[1] then return {0, cur} end
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])
return {token, ''}`)
	// KEYS[1] leader; ARGV[1] our value, ARGV[2] TTL ms.
	renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	// KEYS[1] leader; ARGV[1] our value.
	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// Lease is one process's seat in the election. Acquire, Run and Release are
// called from one goroutine in turn; Held, Lost, Token and Value from any.
type Lease struct {
	cfg Config
	rc  redis.UniversalClient
	log *zap.Logger

	base     time.Time    // monotonic origin for deadline
	deadline atomic.Int64 // ns since base until which the lease counts as held; 0 = not held

	leader atomic.Pointer[string] // the holder Redis named last (Leader)

	mu       sync.Mutex
	token    int64
	value    string
	lost     chan struct{}
	lostOnce *sync.Once

	shortWarned time.Time // when a lease short of replicas was last logged
}

// New builds a lease; nothing is sent to Redis until Acquire.
func New(cfg Config, rc redis.UniversalClient, log *zap.Logger) (*Lease, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	closed := make(chan struct{})
	close(closed)
	return &Lease{cfg: cfg, rc: rc, log: log, base: time.Now(), lost: closed, lostOnce: &sync.Once{}}, nil
}

// Holder is this process's id in the leader key.
func (l *Lease) Holder() string { return l.cfg.Holder }

// LeaderKey is the key this lease lives in.
func (l *Lease) LeaderKey() string { return l.cfg.Keys.Leader() }

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.cfg.TTL }

// Token is the current term's token (0 before the first Acquire).
func (l *Lease) Token() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

// Value is the current term's "token:holder", what the leader key holds
// while this process leads; checkpoint writes are fenced on it.
func (l *Lease) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Term is one term's fence for checkpoint.WithFence: the leader key and the
// term's value, fixed when Term is called, so a store built for one term
// never writes with a later term's token.
type Term struct{ key, value string }

// FenceKey is the leader key.
func (t Term) FenceKey() string { return t.key }

// FenceToken is the term's "token:holder" ("" before the first Acquire).
func (t Term) FenceToken() string { return t.value }

// Term returns the current term's fence.
func (l *Lease) Term() Term { return Term{key: l.LeaderKey(), value: l.Value()} }

// TermOf is the fence of a term known by its value (a deposed leader's, in a
// test or a tool), for the leader key of name outside Redis Cluster.
func TermOf(name, value string) Term { return Term{key: LeaderKey(name), value: value} }

// Lost is closed when the current term ends (expired by this process's own
// clock, or another holder seen in Redis). Before Acquire it is closed.
func (l *Lease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Leader is the holder Redis named in the leader key when this process last
// read it: its own Holder while it leads, another relay's while it waits,
// "" when the key was free or has not been read yet.
func (l *Lease) Leader() string {
	if p := l.leader.Load(); p != nil {
		return *p
	}
	return ""
}

func (l *Lease) sawLeader(holder string) { l.leader.Store(&holder) }

// Held returns nil while the lease counts as held by this process's clock,
// ErrLost otherwise. It is cheap enough to call before every publish.
func (l *Lease) Held() error {
	d := l.deadline.Load()
	if d == 0 || time.Since(l.base) >= time.Duration(d) {
		return ErrLost
	}
	return nil
}

func (l *Lease) validFrom(sent time.Time) {
	until := sent.Sub(l.base) + time.Duration(float64(l.cfg.TTL)*validFraction)
	l.deadline.Store(int64(until))
}

func (l *Lease) remaining() time.Duration {
	return time.Duration(l.deadline.Load()) - time.Since(l.base)
}

// Acquire blocks until this process holds the lease (or ctx ends) and
// returns the term's token. Redis being unreachable is waited out.
func (l *Lease) Acquire(ctx context.Context) (int64, error) {
	keys := []string{l.cfg.Keys.Leader(), l.cfg.Keys.Token()}
	ttl := l.cfg.TTL.Milliseconds()
	var lastHolder string
	var redisDown bool
	for {
		sent := time.Now()
		callCtx, cancel := context.WithTimeout(ctx, l.cfg.TTL/2)
		cmd, short := l.eval(callCtx, acquireScript, keys, l.cfg.Holder, ttl)
		res, err := cmd.Slice()
		cancel()
		taken := err == nil && len(res) == 2 && toInt(res[0]) > 0
		if taken && short != nil {
			// Taken on the master only: a failover now could promote a
			// replica without it and let another relay take it too. Not
			// this term: give it back and try again.
			l.releaseValue(ctx, fmt.Sprintf("%d:%s", toInt(res[0]), l.cfg.Holder))
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		switch {
		case err != nil:
			if !redisDown {
				l.log.Warn("cannot reach redis to take the leader lease; retrying", zap.Error(err))
				redisDown = true
			}
		case taken && short != nil:
			redisDown = false
			l.warnShort("leader lease taken but not acknowledged by enough replicas: released, not leading this term; retrying", short)
		case taken:
			token := toInt(res[0])
			l.validFrom(sent)
			l.mu.Lock()
			l.token, l.value = token, fmt.Sprintf("%d:%s", token, l.cfg.Holder)
			l.lost, l.lostOnce = make(chan struct{}), &sync.Once{}
			l.mu.Unlock()
			l.sawLeader(l.cfg.Holder)
			l.log.Info("leader lease acquired", zap.Int64("token", token), zap.String("holder", l.cfg.Holder),
				zap.Duration("ttl", l.cfg.TTL), zap.String("previous", lastHolder))
			return token, nil
		default:
			redisDown = false
			cur := ""
			if len(res) == 2 {
				cur, _ = res[1].(string)
			}
			_, holder, _ := strings.Cut(cur, ":")
			l.sawLeader(holder)
			if cur != lastHolder {
				l.log.Info("standby: another relay holds the leader lease; waiting", zap.String("leader", cur),
					zap.String("holder", l.cfg.Holder))
				lastHolder = cur
			}
		}
		if err := backoff.Sleep(ctx, l.cfg.PollEvery); err != nil {
			return 0, err
		}
	}
}

func toInt(v any) int64 {
	n, _ := v.(int64)
	return n
}

// Run renews the lease until ctx ends (nil is returned; the caller then
// Releases) or the lease is lost (ErrLost, and Lost is closed). A failed
// renewal is retried quickly while the lease is still valid by this
// process's clock.
func (l *Lease) Run(ctx context.Context) error {
	value := l.Value()
	keys := []string{l.cfg.Keys.Leader()}
	ttl := l.cfg.TTL.Milliseconds()
	retryEvery := min(l.cfg.RenewEvery, 250*time.Millisecond)
	next := time.NewTimer(l.cfg.RenewEvery)
	defer next.Stop()
	expire := time.NewTimer(max(l.remaining(), 0))
	defer expire.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-expire.C:
			return l.lose("not renewed in time (redis unreachable, or this process was paused)")
		case <-next.C:
		}
		// After a pause both timers may be due at once and select picks
		// either: the clock decides, not the order.
		if l.remaining() <= 0 {
			return l.lose("not renewed in time (redis unreachable, or this process was paused)")
		}
		sent := time.Now()
		callCtx, cancel := context.WithTimeout(ctx, min(l.remaining(), l.cfg.RenewEvery))
		cmd, short := l.eval(callCtx, renewScript, keys, value, ttl)
		n, err := cmd.Int64()
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			l.log.Warn("renewing the leader lease failed; retrying", zap.Error(err),
				zap.Duration("valid_for", l.remaining().Round(time.Millisecond)))
			next.Reset(retryEvery)
		case n == 0:
			return l.lose("redis no longer holds this relay's lease (expired, or another relay took it)")
		case short != nil:
			// Renewed on the master only: counting it would outlive the
			// lease a promoted replica holds. Retried like a failure.
			l.warnShort("leader lease renewed but not acknowledged by enough replicas; retrying", short,
				zap.Duration("valid_for", l.remaining().Round(time.Millisecond)))
			next.Reset(retryEvery)
		default:
			l.validFrom(sent)
			expire.Reset(max(l.remaining(), 0))
			next.Reset(l.cfg.RenewEvery)
		}
	}
}

func (l *Lease) lose(why string) error {
	l.deadline.Store(0)
	l.sawLeader("")
	l.mu.Lock()
	once, lost, token := l.lostOnce, l.lost, l.token
	l.mu.Unlock()
	once.Do(func() {
		close(lost)
		l.log.Error("leader lease lost: stop publishing", zap.String("reason", why), zap.Int64("token", token),
			zap.String("holder", l.cfg.Holder))
	})
	return ErrLost
}

// Release gives the lease up (if Redis still names this process), so a
// standby takes over at once instead of after the TTL.
func (l *Lease) Release(ctx context.Context) {
	value := l.Value()
	l.deadline.Store(0)
	l.sawLeader("")
	l.mu.Lock()
	once, lost := l.lostOnce, l.lost
	l.mu.Unlock()
	once.Do(func() { close(lost) })
	if value == "" {
		return
	}
	if l.releaseValue(ctx, value) {
		l.log.Info("leader lease released", zap.String("holder", l.cfg.Holder))
	}
}

// releaseValue deletes the leader key if it still holds value, and reports
// whether it did. No WAIT: a release lost in a failover only makes a
// standby wait for the TTL.
func (l *Lease) releaseValue(ctx context.Context, value string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	n, err := releaseScript.Run(ctx, l.rc, []string{l.cfg.Keys.Leader()}, value).Int64()
	if err != nil {
		l.log.Warn("releasing the leader lease failed; a standby takes over when it expires", zap.Error(err))
	}
	return n == 1
}

// eval runs a lease script. With WaitReplicas it WAITs on the same
// connection and short says, when fewer replicas acknowledged, how many
// did.
func (l *Lease) eval(ctx context.Context, s *redis.Script, keys []string, args ...any) (res *redis.Cmd, short error) {
	if l.cfg.WaitReplicas == 0 {
		return s.Run(ctx, l.rc, keys, args...), nil
	}
	res, acked, err := rediswait.Eval(ctx, l.rc, s, keys, args, l.cfg.WaitReplicas, l.cfg.WaitTimeout)
	if res.Err() != nil || (err == nil && acked >= int64(l.cfg.WaitReplicas)) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("WAIT failed: %w", err)
	}
	return res, fmt.Errorf("%d of %d replicas acknowledged within %s (redis.wait_replicas, redis.wait_timeout)",
		acked, l.cfg.WaitReplicas, l.cfg.WaitTimeout)
}

// shortWarnEvery spaces the warnings about a lease short of replicas: a
// standby tries every PollEvery.
const shortWarnEvery = time.Minute

// warnShort logs msg at most once a minute.
func (l *Lease) warnShort(msg string, short error, fields ...zap.Field) {
	l.mu.Lock()
	due := time.Since(l.shortWarned) >= shortWarnEvery
	if due {
		l.shortWarned = time.Now()
	}
	l.mu.Unlock()
	if due {
		l.log.Warn(msg, append(fields, zap.Error(short), zap.String("holder", l.cfg.Holder))...)
	}
}

// Package instance owns one relay per name and per source.server_id: the
// heartbeat key that refuses a second relay with this name (Heartbeat), and
// SHOW SLAVE HOSTS for another replica using this server_id (ServerIDs; the
// source drops one of two such streams).
package instance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/ops"
)

// TTL is how long a relay's heartbeat key outlives its last refresh (Run
// refreshes it every 2s). A relay that died without cleaning up blocks a
// new one with its name for at most this long.
const (
	TTL   = 6 * time.Second
	every = 2 * time.Second
)

// Config is what Heartbeat and ServerIDs read from the relay's config.
type Config struct {
	Name          string // name
	ServerID      uint32 // source.server_id; 0 is a random id per start
	HA            bool   // ha.enabled: the lease decides who streams
	InstanceKey   string // the heartbeat key of this name
	LeaderKey     string // the leader lease's key (with ha.enabled)
	CheckpointKey string // checkpoint.key, which two relays with one name share
}

// Heartbeat is the relay name's heartbeat key in Redis: Claim takes it at
// start, Run refreshes it, Release deletes it.
type Heartbeat struct {
	cfg    Config
	redis  redis.UniversalClient
	notice *ops.Notice
	log    *zap.Logger
	// id is this process's value in the heartbeat key, set by Claim.
	id string
}

// NewHeartbeat makes the heartbeat of cfg.Name; it names a second relay
// with this name on notice (/readyz).
func NewHeartbeat(cfg Config, rdb redis.UniversalClient, notice *ops.Notice, log *zap.Logger) *Heartbeat {
	return &Heartbeat{cfg: cfg, redis: rdb, notice: notice, log: log}
}

// instanceID names this process in the heartbeat key.
func instanceID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/pid %d/%08x", host, os.Getpid(), rand.Uint32())
}

// liveInstances are the heartbeat values of the relays running in this
// process.
var liveInstances sync.Map

// leftByDeadProcess reports whether a heartbeat value (instanceID's form)
// was written by a process on this host that is not running any more: the
// same pid as this process but none of its relays (a restarted container,
// where the relay is pid 1 again: two live processes cannot share a pid on
// one host) or a pid that no longer exists.
func leftByDeadProcess(instance string) bool {
	host, _ := os.Hostname()
	parts := strings.Split(instance, "/")
	if len(parts) != 3 || parts[0] != host || !strings.HasPrefix(parts[1], "pid ") {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(parts[1], "pid "))
	if err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		// Ours, unless a relay of this very process wrote it (several
		// relays embedded in one process).
		_, live := liveInstances.Load(instance)
		return !live
	}
	// Signal 0 checks that the process exists; EPERM means it does (owned
	// by another user).
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// Claim takes the heartbeat key of this relay's name, waiting up to TTL
// for one left by a relay that died. Another relay refreshing it is
// running under the same name: without ha.enabled the two would fight
// over one checkpoint, so the start is refused. With ha.enabled the lease
// decides and this is skipped.
func (h *Heartbeat) Claim(ctx context.Context) error {
	if h.cfg.HA {
		return nil
	}
	if h.id == "" {
		h.id = instanceID()
		liveInstances.Store(h.id, true)
	}
	key := h.cfg.InstanceKey
	deadline := time.Now().Add(TTL + every)
	var other string
	for {
		ok, err := h.redis.SetNX(ctx, key, h.id, TTL).Result()
		if err != nil {
			return nil // Redis down: the start-up checks report it
		}
		if ok {
			return nil
		}
		v, err := h.redis.Get(ctx, key).Result()
		if err == nil && v == h.id {
			return nil
		}
		if err == nil {
			other = v
		}
		if other != "" && leftByDeadProcess(other) {
			// A relay killed on this host (SIGKILL, OOM, a restarted
			// container) left it: no need to wait for the TTL.
			h.log.Info("the relay name's heartbeat was left by a process on this host that is no longer running; taking it over",
				zap.String("instance", other), zap.String("key", key))
			if err := h.redis.Set(ctx, key, h.id, TTL).Err(); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another relay named %q is running (instance %s, heartbeat in redis key %s): two relays with one name fight over one checkpoint; give each its own name, or set ha.enabled on both so one leads and the other waits",
				h.cfg.Name, other, key)
		}
		if other != "" {
			h.log.Warn("another relay with this name has a live heartbeat; waiting for it to expire (a relay that died) before refusing to start",
				zap.String("instance", other), zap.String("key", key), zap.Duration("ttl", TTL))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Run refreshes the claimed heartbeat key until ctx ends (Release deletes
// it after, so a restart is not held up). Without a claim (ha.enabled)
// there is nothing to refresh.
func (h *Heartbeat) Run(ctx context.Context) error {
	if h.cfg.HA || h.id == "" {
		return nil
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		h.refresh(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Release deletes the heartbeat key if it is this process's.
func (h *Heartbeat) Release() {
	if h.id != "" {
		defer liveInstances.Delete(h.id)
	}
	if h.cfg.HA || h.id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if v, err := h.redis.Get(ctx, h.cfg.InstanceKey).Result(); err == nil && v == h.id {
		h.redis.Del(ctx, h.cfg.InstanceKey)
	}
}

// Other is the heartbeat of another relay running with this name, if one
// is in Redis (never with ha.enabled: the lease decides).
func (h *Heartbeat) Other(ctx context.Context) (instance string, ok bool) {
	if h.cfg.HA {
		return "", false
	}
	v, err := h.redis.Get(ctx, h.cfg.InstanceKey).Result()
	if err != nil || v == h.id {
		return "", false
	}
	return v, true
}

func (h *Heartbeat) refresh(ctx context.Context) {
	key := h.cfg.InstanceKey
	v, err := h.redis.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil) || (err == nil && v == h.id):
		h.redis.Set(ctx, key, h.id, TTL)
	case err == nil:
		msg := fmt.Sprintf("another relay named %q is running (instance %s): both write checkpoint %s; give each its own name or set ha.enabled", h.cfg.Name, v, h.cfg.CheckpointKey)
		h.notice.Set(msg, TTL)
		h.log.Error("two relays with one name", zap.String("instance", v), zap.String("key", key), zap.String("problem", msg))
	}
}

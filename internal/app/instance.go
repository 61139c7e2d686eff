package app

// One relay per name and per source.server_id: the heartbeat key that
// refuses a second relay with this name, and SHOW SLAVE HOSTS for another
// replica using this server_id (the source drops one of two such streams).

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

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// instanceTTL is how long a relay's heartbeat key outlives its last
// refresh (every instanceEvery). A relay that died without cleaning up
// blocks a new one with its name for at most this long.
const (
	instanceTTL   = 6 * time.Second
	instanceEvery = 2 * time.Second
)

// serverIDConflict reports whether err is the source dropping the stream
// because another replica connected with the same server_id. The message
// test covers a reader that still wraps it as a purged position.
func serverIDConflict(err error) bool {
	return errors.Is(err, binlog.ErrServerIDConflict) ||
		(err != nil && strings.Contains(err.Error(), "same server_uuid/server_id"))
}

// conflictHint is the operator's fix for a server_id conflict.
func (a *App) conflictHint() string {
	return fmt.Sprintf("another replica of source %s uses source.server_id %d (a second relay with this config, or a replica given that id): give each relay its own source.server_id (SHOW SLAVE HOSTS on the source lists them)",
		a.sourceAddr(), a.Cfg.Source.ServerID)
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

// claimName takes the heartbeat key of this relay's name, waiting up to
// instanceTTL for one left by a relay that died. Another relay refreshing
// it is running under the same name: without ha.enabled the two would
// fight over one checkpoint, so the start is refused. With ha.enabled the
// lease decides and this is skipped.
func (a *App) claimName(ctx context.Context) error {
	if a.Cfg.HA.Enabled {
		return nil
	}
	if a.gap.instance == "" {
		a.gap.instance = instanceID()
		liveInstances.Store(a.gap.instance, true)
	}
	deadline := time.Now().Add(instanceTTL + instanceEvery)
	var other string
	for {
		ok, err := a.Redis.SetNX(ctx, a.instanceKey(), a.gap.instance, instanceTTL).Result()
		if err != nil {
			return nil // Redis down: the start-up checks report it
		}
		if ok {
			return nil
		}
		v, err := a.Redis.Get(ctx, a.instanceKey()).Result()
		if err == nil && v == a.gap.instance {
			return nil
		}
		if err == nil {
			other = v
		}
		if other != "" && leftByDeadProcess(other) {
			// A relay killed on this host (SIGKILL, OOM, a restarted
			// container) left it: no need to wait for the TTL.
			a.Log.Info("the relay name's heartbeat was left by a process on this host that is no longer running; taking it over",
				zap.String("instance", other), zap.String("key", a.instanceKey()))
			if err := a.Redis.Set(ctx, a.instanceKey(), a.gap.instance, instanceTTL).Err(); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another relay named %q is running (instance %s, heartbeat in redis key %s): two relays with one name fight over one checkpoint; give each its own name, or set ha.enabled on both so one leads and the other waits",
				a.Cfg.Name, other, a.instanceKey())
		}
		if other != "" {
			a.Log.Warn("another relay with this name has a live heartbeat; waiting for it to expire (a relay that died) before refusing to start",
				zap.String("instance", other), zap.String("key", a.instanceKey()), zap.Duration("ttl", instanceTTL))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// instanceService refreshes the heartbeat key and writes the first-save
// marker (Run deletes the heartbeat when it returns, so a restart is not
// held up).
func (a *App) instanceService() service {
	return func(ctx context.Context) error {
		tick := time.NewTicker(instanceEvery)
		defer tick.Stop()
		for {
			if !a.Cfg.HA.Enabled && a.gap.instance != "" {
				a.refreshInstance(ctx)
			}
			a.markFirstSave(ctx)
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
	}
}

// releaseName deletes the heartbeat key if it is this process's.
func (a *App) releaseName() {
	if a.gap.instance != "" {
		defer liveInstances.Delete(a.gap.instance)
	}
	if a.Cfg.HA.Enabled || a.gap.instance == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if v, err := a.Redis.Get(ctx, a.instanceKey()).Result(); err == nil && v == a.gap.instance {
		a.Redis.Del(ctx, a.instanceKey())
	}
}

func (a *App) refreshInstance(ctx context.Context) {
	v, err := a.Redis.Get(ctx, a.instanceKey()).Result()
	switch {
	case errors.Is(err, redis.Nil) || (err == nil && v == a.gap.instance):
		a.Redis.Set(ctx, a.instanceKey(), a.gap.instance, instanceTTL)
	case err == nil:
		msg := fmt.Sprintf("another relay named %q is running (instance %s): both write checkpoint %s; give each its own name or set ha.enabled", a.Cfg.Name, v, a.Cfg.Checkpoint.Key)
		a.gap.set(msg, instanceTTL)
		a.Log.Error("two relays with one name", zap.String("instance", v), zap.String("key", a.instanceKey()), zap.String("problem", msg))
	}
}

// checkDuplicates reports another relay with this name (its heartbeat in
// Redis) and another replica of the source with this source.server_id
// (SHOW SLAVE HOSTS).
func (c *checker) checkDuplicates(ctx context.Context) {
	a := c.a
	if !a.Cfg.HA.Enabled {
		if v, err := a.Redis.Get(ctx, a.instanceKey()).Result(); err == nil && v != a.gap.instance {
			c.add(Warning, "relay "+a.Cfg.Name, "another relay named %q is running (instance %s): a second one would be refused at start; give each relay its own name, or set ha.enabled", a.Cfg.Name, v)
		}
	}
	id := a.Cfg.Source.ServerID
	if id == 0 {
		return // a random id per start
	}
	where := "source " + a.sourceAddr()
	others, err := a.sameServerID(ctx)
	if err != nil {
		c.add(Warning, where, "cannot list the source's replicas to look for a second relay with source.server_id %d (SHOW SLAVE HOSTS or SHOW REPLICAS: %v): grant REPLICATION MASTER ADMIN (MariaDB) or REPLICATION SLAVE (MySQL) to the relay user", id, err)
		return
	}
	sev := Warning
	if a.starting.Load() {
		sev = Error
	}
	for _, o := range others {
		c.add(sev, where, "another replica is connected to the source with source.server_id %d (registered as %s): the source drops one of two streams with one server_id; give each relay its own source.server_id", id, o)
	}
}

// sameServerID lists the replicas registered on the source (SHOW SLAVE
// HOSTS) with this relay's source.server_id, as host:port. With ha.enabled
// the leader of this name streams with it: not a conflict while the lease
// is held.
func (a *App) sameServerID(ctx context.Context) ([]string, error) {
	id := a.Cfg.Source.ServerID
	if id == 0 {
		return nil, nil
	}
	// SHOW REPLICAS on MySQL (8.0.22+; MySQL 9 removed SHOW SLAVE HOSTS),
	// SHOW SLAVE HOSTS on MariaDB and older MySQL.
	first, second := "SHOW SLAVE HOSTS", "SHOW REPLICAS"
	if f, _ := a.Flavor(ctx); f == binlog.FlavorMySQL {
		first, second = second, first
	}
	rows, err := a.Source.QueryContext(ctx, first)
	if err != nil {
		var err2 error
		if rows, err2 = a.Source.QueryContext(ctx, second); err2 != nil {
			return nil, err
		}
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		raw := make([][]byte, len(cols))
		for i := range vals {
			vals[i] = &raw[i]
		}
		if err := rows.Scan(vals...); err != nil {
			return nil, err
		}
		var sid, host, port string
		for i, col := range cols {
			switch col {
			case "Server_id", "Server_Id":
				sid = string(raw[i])
			case "Host":
				host = string(raw[i])
			case "Port":
				port = string(raw[i])
			}
		}
		if sid == strconv.FormatUint(uint64(id), 10) {
			out = append(out, host+":"+port)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) > 0 && a.Cfg.HA.Enabled {
		if v, _ := a.Redis.Get(ctx, a.Cfg.RedisKeys().Leader()).Result(); v != "" {
			return nil, nil
		}
	}
	return out, nil
}

// waitServerIDFree waits up to instanceTTL for a replica registered with
// this relay's server_id to go (the stream of a relay that just died ends
// when the source next writes to it); the start-up checks then refuse a
// live one.
func (a *App) waitServerIDFree(ctx context.Context) {
	deadline := time.Now().Add(instanceTTL)
	for {
		others, err := a.sameServerID(ctx)
		if err != nil || len(others) == 0 || time.Now().After(deadline) {
			return
		}
		a.Log.Warn("a replica with this relay's source.server_id is connected to the source; waiting for it to go before refusing to start",
			zap.Uint32("server_id", a.Cfg.Source.ServerID), zap.Strings("registered_as", others))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

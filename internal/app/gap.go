package app

// Gaps and duplicates: what the relay does when its position is gone from
// the source (purged binlog, a checkpoint Redis lost), and how it notices a
// second relay with its name or its source.server_id.
//
// A gap is taken only where nothing is lost: rows of tables with a status
// column stay PENDING and the sweeper sends them. Tables without one
// (debezium, eventuate without a published column) would lose the rows in
// the gap, so the relay refuses unless the operator accepts the loss with
// `run --accept-gap`.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/binlog"
	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/metrics"
)

// RunOptions are the flags of `binlog-relay run`.
type RunOptions struct {
	// AcceptGap: see App.AcceptGap.
	AcceptGap bool
}

// Flags registers the options on fs.
func (o *RunOptions) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.AcceptGap, "accept-gap", false, "when the saved position was purged or Redis lost the checkpoint, start at the current position even for tables without a status column, whose rows in the gap are then lost (docs/operating.md, Gaps)")
}

// gapReadyFor is how long /readyz names a gap after the relay took it, so
// a rollout or a dashboard sees it.
const gapReadyFor = 5 * time.Minute

// instanceTTL is how long a relay's heartbeat key outlives its last
// refresh (every instanceEvery). A relay that died without cleaning up
// blocks a new one with its name for at most this long.
const (
	instanceTTL   = 6 * time.Second
	instanceEvery = 2 * time.Second
)

// gapState is what /readyz says about gaps and conflicts.
type gapState struct {
	reason atomic.Pointer[timedReason]
	// instance is this process's value in the heartbeat key.
	instance string
	// marked is set once the first-save marker is known to be in Redis.
	marked atomic.Bool
}

type timedReason struct {
	text  string
	until time.Time
}

func (g *gapState) set(text string, d time.Duration) {
	g.reason.Store(&timedReason{text: text, until: time.Now().Add(d)})
}

// gapReasons are /readyz's reasons about a gap taken recently or a
// server_id conflict going on.
func (a *App) gapReasons() []string {
	r := a.gap.reason.Load()
	if r == nil || time.Now().After(r.until) {
		return nil
	}
	return []string{r.text}
}

// markerKey records that this relay name saved a checkpoint once, so a
// start without a checkpoint can tell a first start from a checkpoint
// Redis lost.
func (a *App) markerKey() string { return a.Cfg.Checkpoint.Key + ":first-saved" }

// instanceKey holds the heartbeat of the relay running under this name.
func (a *App) instanceKey() string { return "binlog-relay:" + a.Cfg.Name + ":instance" }

// statuslessTables are the tables whose rows in a gap would be lost.
func (a *App) statuslessTables() []string {
	var out []string
	for _, t := range a.Cfg.Tables {
		if t.Columns.Status == "" {
			out = append(out, t.FullName())
		}
	}
	return out
}

// GapRefusedError is a gap the relay refused to take: an operator must
// restore the position or accept the loss (--accept-gap). A standby that
// meets one stops rather than retrying.
type GapRefusedError struct{ msg string }

func (e *GapRefusedError) Error() string { return e.msg }

// gapRefusal is the error refusing to skip what, or nil when the gap may
// be taken: every table has a status column and the sweeper runs, or the
// operator passed --accept-gap.
func (a *App) gapRefusal(what string) error {
	if a.AcceptGap {
		return nil
	}
	if lost := a.statuslessTables(); len(lost) > 0 {
		return &GapRefusedError{fmt.Sprintf("%s. Starting at the current position would lose the rows committed since to tables without a status column (%s): the sweeper cannot see them. Restore the position (binlog, checkpoint), or start with `binlog-relay run --accept-gap` to skip them",
			what, strings.Join(lost, ", "))}
	}
	if !a.Cfg.SweeperEnabled() {
		return &GapRefusedError{fmt.Sprintf("%s. Rows committed since stay PENDING, and sweeper.enabled is false: nothing would send them. Enable the sweeper, or, if `binlog-relay sweep` runs elsewhere, start with `binlog-relay run --accept-gap`", what)}
	}
	return nil
}

// checkGap reports a gap the start-up checks found: an error when it would
// be refused, a warning saying what will happen otherwise.
func (c *checker) checkGap(where, what string) {
	if err := c.a.gapRefusal(what); err != nil {
		c.add(Error, where, "%v", err)
		return
	}
	how := "the relay will start at the current position; rows committed in the gap stay PENDING and the sweeper sends them"
	if len(c.a.statuslessTables()) > 0 || !c.a.Cfg.SweeperEnabled() {
		how = "the relay will start at the current position (--accept-gap): rows committed in the gap to tables without a status column are lost"
	}
	c.add(Warning, where, "%s: %s", what, how)
}

// takeGap reports a gap the relay is about to take: an error line with
// both positions, binlog_relay_gaps_total and a readiness reason.
func (a *App) takeGap(what string, saved, now binlog.Position) {
	handling := metrics.GapSweeper
	how := "rows committed in the gap stay PENDING and the sweeper sends them"
	if len(a.statuslessTables()) > 0 || !a.Cfg.SweeperEnabled() {
		handling = metrics.GapAccepted
		how = "accepted with --accept-gap: rows committed in the gap to tables without a status column are not sent"
	}
	a.Metrics().Gap(handling)
	a.gap.set(fmt.Sprintf("gap taken at %s: %s; restarted at %s (%s)", time.Now().UTC().Format(time.RFC3339), what, now, how), gapReadyFor)
	a.Log.Error("gap: restarting at the source's current position; "+how,
		zap.String("reason", what), zap.String("saved_gtid", saved.GTIDSet), zap.String("saved_binlog_file", saved.File),
		zap.Uint32("saved_binlog_pos", saved.Pos), zap.String("gtid", now.GTIDSet), zap.String("binlog_file", now.File),
		zap.Uint32("binlog_pos", now.Pos), zap.String("handling", handling))
}

// purgedGap handles binlog.ErrPositionPurged from the stream: it returns
// where to restart, or the refusal.
func (a *App) purgedGap(ctx context.Context, saved binlog.Position, cause error) (binlog.Position, error) {
	if !binlog.IsPurgedMessage(cause.Error()) {
		// Error 1236 for another reason (a GTID the source's binlog does
		// not hold after a failover, out-of-order GTIDs under strict mode):
		// reported, never answered by jumping ahead.
		return saved, fmt.Errorf("the source refused the relay's position %s, and not because it was purged: %w", saved, cause)
	}
	now, err := a.CurrentPosition(ctx)
	if err != nil {
		return now, errors.Join(cause, err)
	}
	what := fmt.Sprintf("the relay's position %s is no longer in the binlog of source %s (purged; the source is now at %s)", saved, a.sourceAddr(), now)
	if err := a.gapRefusal(what); err != nil {
		a.Log.Error("gap refused", zap.Error(cause))
		return now, err
	}
	a.Log.Error("the source no longer has the relay's position", zap.Error(cause))
	a.takeGap(what, saved, now)
	return now, nil
}

// checkpointLost reports whether this relay name saved a checkpoint before
// (the marker is in Redis) that is gone now, and when the first was saved.
// A Redis that lost every key (restarted without persistence) lost the
// marker too and looks like a first start: run Redis with persistence.
func (a *App) checkpointLost(ctx context.Context) (since string, lost bool, err error) {
	v, err := a.Redis.Get(ctx, a.markerKey()).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading %s: %w", a.markerKey(), err)
	}
	return v, true, nil
}

// startWithoutCheckpoint decides a start at the current position p when no
// checkpoint was found: fine on a first start, a gap otherwise.
func (a *App) startWithoutCheckpoint(ctx context.Context, p binlog.Position) error {
	since, lost, err := a.checkpointLost(ctx)
	if err != nil || !lost {
		return err
	}
	what := a.lostWhat(since)
	if err := a.gapRefusal(what); err != nil {
		return err
	}
	a.takeGap(what, binlog.Position{}, p)
	return nil
}

// lostWhat describes a lost checkpoint.
func (a *App) lostWhat(since string) string {
	return fmt.Sprintf("no checkpoint under %s, but relay %q saved one before (first at %s; marker %s): Redis lost it or it was deleted",
		a.Cfg.Checkpoint.Key, a.Cfg.Name, since, a.markerKey())
}

// markFirstSave writes the first-save marker once the running relay has
// saved a checkpoint (SET NX: the first time is kept).
func (a *App) markFirstSave(ctx context.Context) {
	if a.gap.marked.Load() {
		return
	}
	r := a.Relay()
	if r == nil {
		return
	}
	cp, ok := r.LastCheckpoint()
	if !ok {
		return
	}
	if err := a.Redis.SetNX(ctx, a.markerKey(), cp.SavedAt.UTC().Format(time.RFC3339), 0).Err(); err == nil {
		a.gap.marked.Store(true)
	}
}

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
		c.add(Warning, where, "cannot list the source's replicas to look for a second relay with source.server_id %d (SHOW SLAVE HOSTS: %v): grant REPLICATION MASTER ADMIN (MariaDB) or REPLICATION SLAVE (MySQL) to the relay user", id, err)
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
	rows, err := a.Source.QueryContext(ctx, "SHOW SLAVE HOSTS")
	if err != nil {
		var err2 error
		if rows, err2 = a.Source.QueryContext(ctx, "SHOW REPLICAS"); err2 != nil {
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
		if v, _ := a.Redis.Get(ctx, lease.LeaderKey(a.Cfg.Name)).Result(); v != "" {
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

package app

// Gaps: what the relay does when its position is gone from the source
// (purged binlog, a checkpoint Redis lost). A second relay with its name or
// its source.server_id is instance.go's.
//
// A gap is taken only where nothing is lost: rows of tables with a status
// column stay PENDING and the sweeper sends them. Tables without one
// (debezium, eventuate without a published column) would lose the rows in
// the gap, so the relay refuses unless the operator accepts the loss with
// `run --accept-gap`.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/sourceinfo"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// gapReadyFor is how long /readyz names a gap after the relay took it, so
// a rollout or a dashboard sees it.
const gapReadyFor = 5 * time.Minute

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
func (a *App) instanceKey() string { return a.Cfg.RedisKeys().Instance() }

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
	if !sourceinfo.IsPurgedMessage(cause.Error()) {
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

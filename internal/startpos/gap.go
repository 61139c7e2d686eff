// Package startpos owns where the relay starts: the first-save marker that
// tells a first start from a checkpoint Redis lost, and the gap policy,
// what the relay does when its position is gone from the source (purged
// binlog, a checkpoint Redis lost). A second relay with its name or its
// source.server_id is package instance's.
//
// A gap is taken only where nothing is lost: rows of tables with a status
// column stay PENDING and the sweeper sends them. Tables without one
// (debezium, eventuate without a published column) would lose the rows in
// the gap, so the relay refuses unless the operator accepts the loss with
// `run --accept-gap`.
package startpos

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
	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/internal/sourceinfo"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// gapReadyFor is how long /readyz names a gap after the relay took it, so
// a rollout or a dashboard sees it.
const gapReadyFor = 5 * time.Minute

// markEvery is how often MarkFirstSave looks for the relay's first save.
const markEvery = 2 * time.Second

// Config is what the gap policy reads from the relay's config and flags.
type Config struct {
	Name           string          // name
	CheckpointKey  string          // checkpoint.key; the marker is this key + ":first-saved"
	Tables         []*outbox.Table // tables
	SweeperEnabled bool            // the sweeper runs (sweeper.enabled, its default)
	AcceptGap      bool            // run --accept-gap: take a gap that loses rows
}

// Source is the source the relay streams from, as the gap policy reads it.
type Source interface {
	// Addr is the address of the source read now (host:port).
	Addr() string
	// CurrentPosition is where the source's binlog is now.
	CurrentPosition(ctx context.Context) (binlog.Position, error)
}

// Deps are what the gap policy reads and reports to.
type Deps struct {
	Redis  redis.UniversalClient // the marker
	Source Source
	// Saved is when the running relay saved its last checkpoint (false
	// before its first save, or with no relay running).
	Saved func() (time.Time, bool)
	// Metrics counts a gap taken (binlog_relay_gaps_total); asked only then.
	Metrics func() *metrics.Metrics
	Notice  *ops.Notice // /readyz names a gap taken
	Log     *zap.Logger
}

// Gaps is the gap policy of one relay name.
type Gaps struct {
	cfg Config
	d   Deps
	// marked is set once the first-save marker is known to be in Redis.
	marked atomic.Bool
}

// New makes the gap policy of cfg.
func New(cfg Config, d Deps) *Gaps { return &Gaps{cfg: cfg, d: d} }

// markerKey records that this relay name saved a checkpoint once, so a
// start without a checkpoint can tell a first start from a checkpoint
// Redis lost.
func (g *Gaps) markerKey() string { return g.cfg.CheckpointKey + ":first-saved" }

// statuslessTables are the tables whose rows in a gap would be lost.
func (g *Gaps) statuslessTables() []string {
	var out []string
	for _, t := range g.cfg.Tables {
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

// Refusal is the error refusing to skip what, or nil when the gap may be
// taken: every table has a status column and the sweeper runs, or the
// operator passed --accept-gap.
func (g *Gaps) Refusal(what string) error {
	if g.cfg.AcceptGap {
		return nil
	}
	if lost := g.statuslessTables(); len(lost) > 0 {
		return &GapRefusedError{fmt.Sprintf("%s. Starting at the current position would lose the rows committed since to tables without a status column (%s): the sweeper cannot see them. Restore the position (binlog, checkpoint), or start with `binlog-relay run --accept-gap` to skip them",
			what, strings.Join(lost, ", "))}
	}
	if !g.cfg.SweeperEnabled {
		return &GapRefusedError{fmt.Sprintf("%s. Rows committed since stay PENDING, and sweeper.enabled is false: nothing would send them. Enable the sweeper, or, if `binlog-relay sweep` runs elsewhere, start with `binlog-relay run --accept-gap`", what)}
	}
	return nil
}

// Handling is how a gap taken is covered, binlog_relay_gaps_total's
// handling label: metrics.GapSweeper when the sweeper sends the rows in
// it, metrics.GapAccepted when rows of tables without a status column (or
// all rows, without the sweeper) are lost (--accept-gap).
func (g *Gaps) Handling() string {
	if len(g.statuslessTables()) > 0 || !g.cfg.SweeperEnabled {
		return metrics.GapAccepted
	}
	return metrics.GapSweeper
}

// take reports a gap the relay is about to take: an error line with both
// positions, binlog_relay_gaps_total and a readiness reason.
func (g *Gaps) take(what string, saved, now binlog.Position) {
	handling := g.Handling()
	how := "rows committed in the gap stay PENDING and the sweeper sends them"
	if handling == metrics.GapAccepted {
		how = "accepted with --accept-gap: rows committed in the gap to tables without a status column are not sent"
	}
	g.d.Metrics().Gap(handling)
	g.d.Notice.Set(fmt.Sprintf("gap taken at %s: %s; restarted at %s (%s)", time.Now().UTC().Format(time.RFC3339), what, now, how), gapReadyFor)
	g.d.Log.Error("gap: restarting at the source's current position; "+how,
		zap.String("reason", what), zap.String("saved_gtid", saved.GTIDSet), zap.String("saved_binlog_file", saved.File),
		zap.Uint32("saved_binlog_pos", saved.Pos), zap.String("gtid", now.GTIDSet), zap.String("binlog_file", now.File),
		zap.Uint32("binlog_pos", now.Pos), zap.String("handling", handling))
}

// Purged handles binlog.ErrPositionPurged from the stream: it returns
// where to restart, or the refusal.
func (g *Gaps) Purged(ctx context.Context, saved binlog.Position, cause error) (binlog.Position, error) {
	if !sourceinfo.IsPurgedMessage(cause.Error()) {
		// Error 1236 for another reason (a GTID the source's binlog does
		// not hold after a failover, out-of-order GTIDs under strict mode):
		// reported, never answered by jumping ahead.
		return saved, fmt.Errorf("the source refused the relay's position %s, and not because it was purged: %w", saved, cause)
	}
	now, err := g.d.Source.CurrentPosition(ctx)
	if err != nil {
		return now, errors.Join(cause, err)
	}
	what := fmt.Sprintf("the relay's position %s is no longer in the binlog of source %s (purged; the source is now at %s)", saved, g.d.Source.Addr(), now)
	if err := g.Refusal(what); err != nil {
		g.d.Log.Error("gap refused", zap.Error(cause))
		return now, err
	}
	g.d.Log.Error("the source no longer has the relay's position", zap.Error(cause))
	g.take(what, saved, now)
	return now, nil
}

// CheckpointLost reports whether this relay name saved a checkpoint before
// (the marker is in Redis) that is gone now, and when the first was saved.
// A Redis that lost every key (restarted without persistence) lost the
// marker too and looks like a first start: run Redis with persistence.
func (g *Gaps) CheckpointLost(ctx context.Context) (since string, lost bool, err error) {
	v, err := g.d.Redis.Get(ctx, g.markerKey()).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading %s: %w", g.markerKey(), err)
	}
	return v, true, nil
}

// StartWithoutCheckpoint decides a start at the current position p when
// no checkpoint was found: fine on a first start, a gap otherwise.
func (g *Gaps) StartWithoutCheckpoint(ctx context.Context, p binlog.Position) error {
	since, lost, err := g.CheckpointLost(ctx)
	if err != nil || !lost {
		return err
	}
	what := g.LostWhat(since)
	if err := g.Refusal(what); err != nil {
		return err
	}
	g.take(what, binlog.Position{}, p)
	return nil
}

// LostWhat describes a lost checkpoint, first saved at since.
func (g *Gaps) LostWhat(since string) string {
	return fmt.Sprintf("no checkpoint under %s, but relay %q saved one before (first at %s; marker %s): Redis lost it or it was deleted",
		g.cfg.CheckpointKey, g.cfg.Name, since, g.markerKey())
}

// MarkFirstSave writes the first-save marker once the running relay has
// saved a checkpoint (SET NX: the first time is kept), looking every 2s
// until it is written or ctx ends.
func (g *Gaps) MarkFirstSave(ctx context.Context) error {
	tick := time.NewTicker(markEvery)
	defer tick.Stop()
	for {
		if g.markOnce(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// markOnce writes the marker if the relay saved a checkpoint; it reports
// whether the marker is known to be in Redis.
func (g *Gaps) markOnce(ctx context.Context) bool {
	if g.marked.Load() {
		return true
	}
	at, ok := g.d.Saved()
	if !ok {
		return false
	}
	if err := g.d.Redis.SetNX(ctx, g.markerKey(), at.UTC().Format(time.RFC3339), 0).Err(); err == nil {
		g.marked.Store(true)
	}
	return g.marked.Load()
}

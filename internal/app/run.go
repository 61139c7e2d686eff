package app

// The run command: start-up, then the binlog path and the services beside
// it until ctx ends (with ha.enabled, ha.go runs the binlog path per lease
// term).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/instance"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/startpos"
	"github.com/binlog-relay/binlog-relay/internal/streamlane"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// Run checks the servers, then streams until ctx ends. A saved position the
// source no longer has is a gap (internal/startpos): taken when the sweeper covers it
// or the operator accepted it, refused otherwise.
func (a *App) Run(ctx context.Context) error {
	setMemoryLimit(a.stages.relay.MaxInflightBytes, a.Log) // memory.go
	a.Source.Pick(ctx)
	if err := a.guard.get(a).heartbeat.Claim(ctx); err != nil { // internal/instance
		return err
	}
	defer a.guard.get(a).heartbeat.Release()
	a.guard.get(a).serverIDs.WaitFree(ctx)
	a.starting.Store(true)
	if problems := a.Check(ctx); preflight.HasErrors(problems) {
		for _, p := range problems {
			a.Log.Error("start-up check failed", zap.String("problem", p.String()))
		}
		return fmt.Errorf("start-up checks failed: %s", preflight.FirstError(problems))
	}
	if a.Cfg.HA.Enabled {
		return a.runLeader(ctx) // ha.go
	}
	r, err := a.build(ctx, a.Store, nil)
	if err != nil {
		return err
	}
	a.relay.Store(r)
	a.leader.Set(true) // the only relay of its name
	defer a.leader.Set(false)
	start, cp, err := startpos.Start(ctx, a.Store, a.Source)
	if err != nil {
		return err
	}
	resumed := cp != nil
	if resumed {
		r.ResumeFrom(*cp) // the publishing ids it saved (relay/seq.go)
	} else {
		if err := a.guard.get(a).gaps.StartWithoutCheckpoint(ctx, start); err != nil { // internal/startpos
			return err
		}
	}
	a.Log.Info("relay starting", zap.Bool("from_checkpoint", resumed), zap.String("gtid", start.GTIDSet),
		zap.String("binlog_file", start.File), zap.Uint32("binlog_pos", start.Pos),
		zap.String("checkpoint_key", a.Cfg.Checkpoint.Key))
	g, gctx := errgroup.WithContext(ctx)
	for _, svc := range a.services() {
		g.Go(func() error { return svc(gctx) })
	}
	g.Go(func() error {
		defer a.stops.run()
		return a.stream(gctx, r, start)
	})
	return g.Wait()
}

// stream runs the binlog path. A purged position is a gap (internal/startpos): the
// stream restarts at the current position or stops with the refusal. A
// second replica with this server_id is never answered by a jump: the
// stream retries from its last checkpoint with backoff until the other one
// goes.
func (a *App) stream(ctx context.Context, r *relay.Relay, start binlog.Position) error {
	ended := a.replica.StreamStarted(r, start)
	defer func() { ended() }()
	wait := backoff.Backoff{Initial: time.Second, Max: 30 * time.Second}
	for {
		began := time.Now()
		err := r.Run(ctx, start)
		resume := start
		if cp, ok := r.LastCheckpoint(); ok {
			resume = cp.Position()
		}
		switch {
		case err == nil:
			a.Log.Info("relay stopped", zap.Int64("published", r.Stats.Published.Load()))
			return nil
		case ctx.Err() != nil:
			return err
		case instance.IsServerIDConflict(err):
			if time.Since(began) > time.Minute {
				wait.Reset()
			}
			pause := wait.Next()
			hint := a.guard.get(a).serverIDs.Hint()
			a.notice.Set("binlog stream from "+a.Source.Addr()+" dropped: "+hint, max(pause, instance.TTL)+pause)
			a.Log.Error("binlog stream dropped by the source: another replica connected with this relay's server_id. Retrying from the last checkpoint; nothing is skipped",
				zap.Uint32("server_id", a.Cfg.Source.ServerID), zap.String("fix", hint), zap.Duration("backoff", pause),
				zap.String("gtid", resume.GTIDSet), zap.String("binlog_file", resume.File), zap.Uint32("binlog_pos", resume.Pos), zap.Error(err))
			if backoff.Sleep(ctx, pause) != nil {
				return nil
			}
			start = resume
		case errors.Is(err, binlog.ErrPositionPurged):
			now, gerr := a.guard.get(a).gaps.Purged(ctx, resume, err)
			if gerr != nil {
				return gerr
			}
			start = now
		case errors.Is(err, binlog.ErrXABufferFull):
			return xaBoundHint(err)
		case errors.As(err, new(*streamlane.Failure)):
			if time.Since(began) > time.Minute {
				wait.Reset()
			}
			pause := wait.Next()
			a.Log.Warn("the stream lane failed: the binlog path starts again from its last checkpoint, and the broker drops the rows it stored already",
				zap.String("stream", a.Cfg.Broker.Stream.Name), zap.Duration("backoff", pause), zap.String("gtid", resume.GTIDSet), zap.Error(err))
			if backoff.Sleep(ctx, pause) != nil {
				return nil
			}
			start = resume
		default:
			return err
		}
		ended = a.replica.StreamStarted(r, start)
	}
}

// xaBoundHint names the settings behind the reader's XA bound, which the
// reader (a library) knows only as Config fields.
func xaBoundHint(err error) error {
	return fmt.Errorf("%w (the bound is source.xa_buffer_rows / source.xa_buffer_bytes)", err)
}

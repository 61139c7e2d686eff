package app

// High availability (docs/ha.md): the leader lease around the binlog path.
// Failover between the replicas listed in source.hosts is internal/source's.

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/startpos"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// runLeader is Run with ha.enabled: the services run all along (a standby
// answers /healthz and /readyz too), the binlog path only while this relay
// holds the lease.
func (a *App) runLeader(ctx context.Context) error {
	l, err := lease.New(leaseConfig(a.Cfg), a.Redis, a.Log.Named("lease"))
	if err != nil {
		return err
	}
	a.lease.Store(l)
	g, gctx := errgroup.WithContext(ctx)
	for _, svc := range a.services() {
		g.Go(func() error { return svc(gctx) })
	}
	g.Go(func() error {
		defer a.stops.run()
		return a.lead(gctx, l)
	})
	return g.Wait()
}

// lead waits for the lease, streams while it holds it, and goes back to
// waiting when it is lost. A graceful stop releases the lease so a standby
// takes over at once. A term that fails otherwise (a server unreachable
// while it starts, say) gives the lease up and is retried with backoff: a
// standby can do no better, and exiting would leave no relay at all if both
// hit it. Configuration errors were refused by the start-up checks.
func (a *App) lead(ctx context.Context, l *lease.Lease) error {
	var last *checkpoint.Checkpoint // what this process saved last, across terms
	wait := backoff.Backoff{Initial: time.Second, Max: 30 * time.Second}
	for {
		if _, err := l.Acquire(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		began := time.Now()
		err := a.term(ctx, l, &last)
		switch {
		case ctx.Err() != nil:
			return err
		case lostLease(err):
			a.Log.Warn("no longer the leader: stopped publishing; waiting to lead again", zap.Error(err))
			continue
		case err == nil:
			return nil
		}
		if refused := (*startpos.GapRefusedError)(nil); errors.As(err, &refused) {
			return err // an operator's decision; another term would refuse the same
		}
		if time.Since(began) > time.Minute {
			wait.Reset()
		}
		pause := wait.Next()
		a.Log.Error("leading failed: lease given up; trying again", zap.Error(err), zap.Duration("backoff", pause))
		if backoff.Sleep(ctx, pause) != nil {
			return nil
		}
	}
}

// behind reports whether checkpoint cp is known to be short of saved:
// saved's GTID set holds a transaction cp's does not, or, without GTIDs, an
// earlier file or position on the same server. Checkpoints that cannot be
// compared are not behind.
func behind(cp, saved checkpoint.Checkpoint) bool {
	if cp.Flavor != saved.Flavor {
		return false
	}
	if cp.GTIDSet != "" && saved.GTIDSet != "" {
		ok, err := binlog.ContainsGTID(cp.Flavor, cp.GTIDSet, saved.GTIDSet)
		return err == nil && !ok
	}
	if cp.GTIDSet == "" && saved.GTIDSet == "" && cp.Server == saved.Server && cp.Server != "" {
		return cp.File < saved.File || cp.File == saved.File && cp.Pos < saved.Pos
	}
	return false
}

func lostLease(err error) bool {
	return errors.Is(err, lease.ErrLost) || errors.Is(err, checkpoint.ErrFenced)
}

// term is one stretch as leader: the pipeline writes the checkpoint only
// through the fenced store and hands a row to the publisher only while the
// lease is valid by this process's clock; losing the lease aborts it at once.
func (a *App) term(ctx context.Context, l *lease.Lease, last **checkpoint.Checkpoint) error {
	a.leader.Set(true)
	defer a.endTerm(ctx)
	store := a.checkpoints.Store(checkpoint.WithFence(l.Term()))
	r, err := a.build(ctx, store, l.Held)
	if err != nil {
		l.Release(ctx)
		return err
	}
	a.relay.Store(r)
	renewCtx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		if err := l.Run(renewCtx); errors.Is(err, lease.ErrLost) {
			r.Abort(err)
		}
	}()
	end := func(release bool) {
		stopRenew()
		<-renewed
		if release {
			l.Release(ctx)
		}
	}
	start, resumed, err := a.termStart(ctx, store, l, r, *last)
	if err != nil {
		end(!lostLease(err))
		return err
	}
	a.Log.Info("leading: relay starting", zap.Int64("token", l.Token()), zap.Bool("from_checkpoint", resumed),
		zap.String("gtid", start.GTIDSet), zap.String("binlog_file", start.File), zap.Uint32("binlog_pos", start.Pos),
		zap.String("checkpoint_key", a.Cfg.Checkpoint.Key))
	err = a.stream(ctx, r, start)
	if cp, ok := r.LastCheckpoint(); ok {
		*last = &cp
	}
	end(!lostLease(err))
	return err
}

// termStart is where a new term resumes: the checkpoint in Redis, or, when
// Redis came back without it (restarted without persistence), the one this
// process saved last, which replays rather than skips. Redis errors are
// retried while the lease lasts.
func (a *App) termStart(ctx context.Context, store checkpoint.Store, l *lease.Lease, r *relay.Relay, last *checkpoint.Checkpoint) (binlog.Position, bool, error) {
	wait := backoff.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for {
		cp, err := store.Load(ctx)
		switch {
		case err == nil:
			if last != nil && behind(cp, *last) {
				// Redis replicates asynchronously: a failover (or a restore)
				// can bring back an older checkpoint. Resuming from it is
				// safe, it only publishes again what came after it.
				a.Log.Warn("the checkpoint in redis is behind the one this relay saved last (writes lost in a redis failover?); resuming from redis's: the rows in between are published again",
					zap.String("gtid", cp.GTIDSet), zap.String("binlog_file", cp.File), zap.Uint32("binlog_pos", cp.Pos),
					zap.String("saved_gtid", last.GTIDSet), zap.String("saved_binlog_file", last.File), zap.Uint32("saved_binlog_pos", last.Pos))
			}
			r.ResumeFrom(cp) // the publishing ids it saved (relay/seq.go)
			return cp.Position(), true, nil
		case errors.Is(err, checkpoint.ErrNotFound) && last != nil:
			a.Log.Warn("no checkpoint in redis (restarted without persistence?); resuming from the checkpoint this relay saved last",
				zap.String("gtid", last.GTIDSet), zap.String("binlog_file", last.File), zap.Uint32("binlog_pos", last.Pos))
			r.ResumeFrom(*last)
			return last.Position(), true, nil
		case errors.Is(err, checkpoint.ErrNotFound):
			// A first start, or a checkpoint Redis lost: a gap (internal/startpos).
			p, err := a.Source.CurrentPosition(ctx)
			if err == nil {
				err = a.guard.get(a).gaps.StartWithoutCheckpoint(ctx, p)
			}
			return p, false, err
		}
		if herr := l.Held(); herr != nil {
			return binlog.Position{}, false, herr
		}
		pause := wait.Next()
		a.Log.Warn("loading the checkpoint failed; retrying", zap.Error(err), zap.Duration("backoff", pause))
		if err := backoff.Sleep(ctx, pause); err != nil {
			return binlog.Position{}, false, err
		}
	}
}

// standby reports a relay with ha.enabled that does not hold the lease.
func (a *App) standby() bool { return a.Cfg.HA.Enabled && !a.leader.Is() }

// leaderName is the holder of the lease as this relay last read it ("" when
// none, or without ha.enabled).
func (a *App) leaderName() string {
	if l := a.lease.Load(); l != nil {
		return l.Leader()
	}
	return ""
}

// endTerm is called when a term as HA leader ends. The relay goes back to
// waiting, so what only a streaming relay reports is dropped: a standby
// exporting its dead stream's lag, a source "down" or a stale checkpoint
// would page people about a relay that is doing its job. At shutdown they
// stay for the last scrape.
func (a *App) endTerm(ctx context.Context) {
	a.leader.Set(false)
	if ctx.Err() != nil {
		return
	}
	a.ops.reader.Store(nil)
	a.ops.pub.Store(nil)
	a.Metrics().ForgetStream()
}

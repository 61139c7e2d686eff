package app

// High availability (docs/ha.md): the leader lease around the binlog path,
// and failover between the replicas listed in source.hosts.

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/binlog"
	"github.com/binlog-relay/binlog-relay/internal/checkpoint"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/lease"
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
		defer a.stopServices()
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
		if refused := (*GapRefusedError)(nil); errors.As(err, &refused) {
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

func lostLease(err error) bool {
	return errors.Is(err, lease.ErrLost) || errors.Is(err, checkpoint.ErrFenced)
}

// term is one stretch as leader: the pipeline writes the checkpoint only
// through the fenced store and hands a row to the publisher only while the
// lease is valid by this process's clock; losing the lease aborts it at once.
func (a *App) term(ctx context.Context, l *lease.Lease, last **checkpoint.Checkpoint) error {
	a.leader.set(true) // leader.go
	defer a.endTerm(ctx)
	store := &checkpoint.Fenced{Client: a.Redis, Key: a.Cfg.Checkpoint.Key, LeaderKey: l.LeaderKey(), Lease: l.Value()}
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
	start, resumed, err := a.termStart(ctx, store, l, *last)
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
func (a *App) termStart(ctx context.Context, store checkpoint.Store, l *lease.Lease, last *checkpoint.Checkpoint) (binlog.Position, bool, error) {
	wait := backoff.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for {
		cp, err := store.Load(ctx)
		switch {
		case err == nil:
			return cp.Position(), true, nil
		case errors.Is(err, checkpoint.ErrNotFound) && last != nil:
			a.Log.Warn("no checkpoint in redis (restarted without persistence?); resuming from the checkpoint this relay saved last",
				zap.String("gtid", last.GTIDSet), zap.String("binlog_file", last.File), zap.Uint32("binlog_pos", last.Pos))
			return last.Position(), true, nil
		case errors.Is(err, checkpoint.ErrNotFound):
			// A first start, or a checkpoint Redis lost: a gap (gap.go).
			p, err := a.CurrentPosition(ctx)
			if err == nil {
				err = a.startWithoutCheckpoint(ctx, p)
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

// sources is the list in source.hosts and which one the relay reads now.
// a.Source dials the current one (it is the database/sql connector), so
// the checks, positions, schemas and metrics follow a failover.
type sources struct {
	hosts []config.MySQL // cfg.Source with each entry's host and port
	conns []driver.Connector
	cur   atomic.Int32
	log   *zap.Logger

	behind map[int]string // replicas reported as lagging, with what they had
}

func newSources(cfg config.MySQL, log *zap.Logger) (*sources, error) {
	s := &sources{log: log, behind: map[int]string{}}
	for i, h := range cfg.Hosts {
		m := cfg
		m.Hosts = nil
		m.Host, m.Port = config.SplitHost(h, cfg.Port)
		dsn, err := m.DSN(fmt.Sprintf("source.hosts[%d]", i))
		if err != nil {
			return nil, err
		}
		mc, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("source.hosts[%d]: %w", i, err)
		}
		c, err := mysql.NewConnector(mc)
		if err != nil {
			return nil, fmt.Errorf("source.hosts[%d]: %w", i, err)
		}
		s.hosts = append(s.hosts, m)
		s.conns = append(s.conns, c)
	}
	return s, nil
}

// Connect dials the current source (driver.Connector).
func (s *sources) Connect(ctx context.Context) (driver.Conn, error) {
	return s.conns[s.cur.Load()].Connect(ctx)
}

// Driver is the MySQL driver (driver.Connector).
func (s *sources) Driver() driver.Driver { return s.conns[0].Driver() }

func (s *sources) current() config.MySQL { return s.hosts[s.cur.Load()] }

// pickSource makes the first listed source that answers the current one,
// before the start-up checks (a replica that is down at start is skipped).
func (a *App) pickSource(ctx context.Context) {
	if a.src == nil {
		return
	}
	for i := range a.src.hosts {
		if _, err := a.src.query(ctx, i, "SELECT 1"); err == nil {
			a.src.cur.Store(int32(i))
			// The start-up checks read cfg.Source (nothing runs yet).
			a.Cfg.Source.Host, a.Cfg.Source.Port = a.src.hosts[i].Host, a.src.hosts[i].Port
			return
		} else {
			a.Log.Warn("source does not answer; trying the next in source.hosts", zap.String("source", a.src.hosts[i].Addr()), zap.Error(err))
		}
	}
}

// failoverHook is the reader's Failover, or nil with one source.
func (a *App) failoverHook() func(context.Context, binlog.Position, string) (string, uint16, error) {
	if a.src == nil {
		return nil
	}
	return a.src.choose
}

// choose picks the source to stream from: at start the first listed, on a
// failure the next ones in turn (the failed one last), taking the first that
// answers and whose binlog holds the relay's GTID position. A replica that
// lags behind it is waited for, not read from: starting from a GTID it does
// not have yet would fail, or on servers without gtid_strict_mode skip rows.
// Without a GTID position there is no failover: binlog file and position
// differ between servers.
func (s *sources) choose(ctx context.Context, pos binlog.Position, failed string) (string, uint16, error) {
	n := len(s.hosts)
	first := 0
	if failed != "" {
		first = int(s.cur.Load()) + 1
	}
	if !pos.HasGTID() {
		cur := s.current()
		if failed != "" {
			s.log.Error("source failover refused: the relay's position has no GTID, and binlog file/position differ between servers, so resuming on another replica could skip or repeat rows. Reconnecting to the same source; turn GTID on (MySQL: gtid_mode=ON, enforce_gtid_consistency=ON) to fail over",
				zap.String("source", failed), zap.String("binlog_file", pos.File), zap.Uint32("binlog_pos", pos.Pos))
		}
		return cur.Host, uint16(cur.Port), nil
	}
	q := "SELECT @@gtid_binlog_pos" // what a MariaDB replica can serve (log_slave_updates)
	if pos.Flavor == binlog.FlavorMySQL {
		q = "SELECT @@gtid_executed"
	}
	wait := backoff.Backoff{Initial: 250 * time.Millisecond, Max: 2 * time.Second}
	for {
		for i := 0; i < n; i++ {
			idx := (first + i) % n
			h := s.hosts[idx]
			have, err := s.query(ctx, idx, q)
			if err != nil {
				if ctx.Err() != nil {
					return "", 0, ctx.Err()
				}
				s.log.Warn("source candidate does not answer", zap.String("source", h.Addr()), zap.Error(err))
				continue
			}
			ok, err := binlog.ContainsGTID(pos.Flavor, have, pos.GTIDSet)
			if err != nil {
				s.log.Warn("source candidate: cannot compare GTID sets", zap.String("source", h.Addr()), zap.Error(err))
				continue
			}
			if !ok {
				if s.behind[idx] != have {
					s.log.Warn("replica is behind the relay's position: waiting for it to catch up rather than reading from it",
						zap.String("source", h.Addr()), zap.String("replica_gtid", have), zap.String("gtid", pos.GTIDSet))
					s.behind[idx] = have
				}
				continue
			}
			delete(s.behind, idx)
			if failed != "" {
				s.log.Warn("binlog source failed over", zap.String("from", failed), zap.String("to", h.Addr()),
					zap.String("gtid", pos.GTIDSet))
			}
			s.cur.Store(int32(idx))
			return h.Host, uint16(h.Port), nil
		}
		if err := wait.Wait(ctx); err != nil {
			return "", 0, err
		}
	}
}

// query runs a one-value query on source idx over a connection of its own.
func (s *sources) query(ctx context.Context, idx int, q string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := s.conns[idx].Connect(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	qc, ok := c.(driver.QueryerContext)
	if !ok {
		return "", errors.New("the MySQL driver cannot run queries on a raw connection")
	}
	rows, err := qc.QueryContext(ctx, q, nil)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(dest); err != nil {
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s returned no row", q)
		}
		return "", err
	}
	switch v := dest[0].(type) {
	case []byte:
		return string(v), nil
	case string:
		return v, nil
	case nil:
		return "", nil
	default:
		return fmt.Sprint(v), nil
	}
}

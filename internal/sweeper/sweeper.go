// Package sweeper is the relay's fallback path. It sends what the binlog
// path could not: rows whose publish failed (PENDING with a next_retry_time),
// rows committed while the relay was down or whose binlog was purged, and
// rows left SENDING by a sweeper that died (zombies). It also archives old
// SENT rows and requeues FAILED ones for an operator.
//
// The primary is never polled: each round asks the replica whether any row
// is due (one indexed EXISTS per table) and only then claims on the primary,
// with SELECT ... FOR UPDATE SKIP LOCKED in a short READ COMMITTED
// transaction, so several sweepers never take the same row and the
// application's own INSERTs never meet a gap lock. Every later write is
// status- and version-checked (optimistic locking), so a row someone else
// moved meanwhile is left alone.
//
// Due means due by the primary's clock, which wrote the times the
// conditions compare (create_time, next_retry_time): a pre-check on a
// replica whose clock reads another time zone runs in the primary's
// (clock.go, precheck.go).
package sweeper

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Publisher is the ordered, confirming publisher (internal/publisher) as the
// sweeper uses it: results come back in job order.
type Publisher interface {
	Run(ctx context.Context, in <-chan publisher.Job[*Claimed], out chan<- publisher.Result[*Claimed]) error
	Connected() bool
}

// Observer is told how many rows each claim took, and how many rows it
// published turned out to be marked by someone else first (duplicates);
// internal/metrics implements it.
type Observer interface {
	SweeperClaims(t *outbox.Table, n int)
	SweeperAlreadySent(t *outbox.Table, n int)
}

// drainTimeout bounds how long a stopping sweeper waits for the batch in
// hand to be confirmed and settled; rows still SENDING after it are zombies
// that a later round resets.
const drainTimeout = 15 * time.Second

// Sweeper sweeps a set of outbox tables.
type Sweeper struct {
	cfg      Config
	plans    []*plan
	replica  *sql.DB
	primary  *sql.DB
	pub      Publisher
	router   *router.Router
	status   *rowstatus.Writer
	log      *zap.Logger
	observer Observer
	changes  tableChanges // tables added and removed while running (tables.go)

	jobs    chan publisher.Job[*Claimed]
	results chan publisher.Result[*Claimed]

	waitingForBroker bool  // logged once per outage
	zones            zones // the primary's clock, for the pre-checks (precheck.go)

	last atomic.Pointer[Round] // the last round's outcome (LastRound)

	// The binlog path beside (binlogpath.go): the grace period of the
	// rounds under way and whether they may claim, when the last rounds
	// ended, a pause seen, and whether the path is far behind.
	path       BinlogPath
	grace      time.Duration
	claims     bool
	lastRounds time.Time
	pausedAt   time.Time
	pacedAt    time.Time // when the grace period and claims were last decided
	progressAt time.Time // the round's last step done (progressed)
	longestGap time.Duration
	deferring  bool
}

// Round is what the sweeper's last round over a table found, for the
// console.
type Round struct {
	At    time.Time
	Table string
	Due   bool   // rows were due (claimed on the primary)
	Err   string // the pre-check's error, if it failed
}

// LastRound is the last round's outcome; ok is false before the first.
func (s *Sweeper) LastRound() (Round, bool) {
	if p := s.last.Load(); p != nil {
		return *p, true
	}
	return Round{}, false
}

// Interval is the time between rounds (sweeper.interval).
func (s *Sweeper) Interval() time.Duration { return s.cfg.Interval }

// New builds a sweeper. replica answers the pre-checks (the relay's binlog
// source); primary takes the claims and status writes. Tables the sweeper
// cannot serve (no status column, no created_at) are logged and skipped.
func New(cfg Config, tables []*outbox.Table, replica, primary *sql.DB, pub Publisher, rt *router.Router,
	sw *rowstatus.Writer, log *zap.Logger) (*Sweeper, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sweeper{cfg: cfg, replica: replica, primary: primary, pub: pub, router: rt, status: sw, log: log, grace: cfg.GracePeriod, claims: true,
		jobs: make(chan publisher.Job[*Claimed], cfg.BatchSize), results: make(chan publisher.Result[*Claimed], cfg.BatchSize)}
	for _, t := range tables {
		p, err := newPlan(t)
		if errors.Is(err, errNotSweepable) {
			log.Info("table not swept", zap.String("table", t.FullName()), zap.String("reason", err.Error()))
			continue
		}
		if err != nil {
			return nil, err
		}
		if cfg.Archive.Mode == ArchiveMove {
			p.ArchiveTable = ident.Quote(t.Schema) + "." + ident.Quote(ArchiveTableName(cfg.Archive.Table, t.Name))
		}
		s.plans = append(s.plans, p)
	}
	return s, nil
}

// SetObserver reports claims to o (metrics).
func (s *Sweeper) SetObserver(o Observer) { s.observer = o }

// Run sweeps every Interval until ctx ends. Database and broker errors are
// logged and the next round tries again: only a configuration the servers
// cannot serve (a missing archive table) is returned.
func (s *Sweeper) Run(ctx context.Context) error {
	if len(s.plans) == 0 && !s.following() {
		s.log.Info("no outbox table to sweep; the sweeper is idle")
		<-ctx.Done()
		return nil
	}
	if err := s.prepare(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for _, p := range s.plans {
		s.log.Info("sweeping", zap.String("table", p.T.FullName()), zap.Stringer("claim", p.mode),
			zap.Duration("grace_period", s.cfg.GracePeriod), zap.Duration("interval", s.cfg.Interval),
			zap.String("archive", s.cfg.Archive.Mode))
	}
	// Work (publishing, settling) outlives ctx by up to drainTimeout, so a
	// batch in flight at a stop is confirmed and marked, not left SENDING.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopDrain := context.AfterFunc(ctx, func() { time.AfterFunc(drainTimeout, cancelWork) })
	defer stopDrain()
	g, gwork := errgroup.WithContext(work)
	g.Go(func() error { return s.pub.Run(gwork, s.jobs, s.results) })
	g.Go(func() error {
		defer cancelWork()
		s.loop(ctx, gwork)
		return nil
	})
	err := g.Wait()
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func (s *Sweeper) loop(ctx, work context.Context) {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		s.pace(time.Now())
		s.applyTableChanges(ctx)
		for start := 0; start < len(s.plans); start += lookBatch {
			batch := s.plans[start:min(start+lookBatch, len(s.plans))]
			looks := s.lookAll(ctx, batch) // lookbatch.go
			s.progressed(time.Now())
			for i, p := range batch {
				if ctx.Err() != nil || work.Err() != nil {
					return
				}
				s.act(ctx, work, p, looks[i])
				s.progressed(time.Now())
			}
		}
		s.lastRounds = time.Now()
		select {
		case <-ctx.Done():
			return
		case <-work.Done():
			return
		case <-tick.C:
		}
	}
}

// round is one look at a table: replica first, the primary only for work.
func (s *Sweeper) round(ctx, work context.Context, p *plan) {
	due, zombies, err := s.look(ctx, p)
	s.act(ctx, work, p, lookResult{due, zombies, err})
}

// act is what a round does after its look at the replica.
func (s *Sweeper) act(ctx, work context.Context, p *plan, l lookResult) {
	log := s.log.With(zap.String("table", p.T.FullName()))
	due, zombies, err := l.due, l.zombies, l.err
	r := &Round{At: time.Now(), Table: p.T.FullName(), Due: due || zombies}
	if err != nil {
		r.Err = err.Error()
	}
	s.last.Store(r)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("sweeper pre-check on the replica failed; next round retries", zap.Error(err))
		}
		return
	}
	if zombies {
		n, err := s.resetZombies(work, p)
		if err != nil {
			log.Warn("resetting zombie rows failed; next round retries", zap.Error(err))
		} else if n > 0 {
			log.Warn("rows stuck SENDING reset to PENDING", zap.Int64("rows", n), zap.Duration("zombie_timeout", s.cfg.ZombieTimeout))
			due = true
		}
	}
	if due {
		s.stalled(time.Now())
	}
	if due && s.claims {
		s.drain(ctx, work, p, log)
	}
	if s.cfg.Archive.Mode != ArchiveOff && time.Since(p.lastArchive) >= s.cfg.Archive.Interval {
		p.lastArchive = time.Now()
		s.archive(ctx, p, log)
	}
}

// look asks the replica whether the table has due rows and zombies, by the
// primary's clock (precheck.go).
func (s *Sweeper) look(ctx context.Context, p *plan) (due, zombies bool, err error) {
	q, args := p.LookSQL(s.grace, s.cfg.ZombieTimeout)
	err = s.precheck(ctx, q, args, &due, &zombies)
	return due, zombies, err
}

// drain claims and publishes batches until a claim comes back short. It
// does not ask the replica again in between: a lagging replica would only
// stop it early.
func (s *Sweeper) drain(ctx, work context.Context, p *plan, log *zap.Logger) {
	if !s.pub.Connected() {
		// Claiming now would only park rows in SENDING until the broker is
		// back; the next round looks again.
		if !s.waitingForBroker {
			// The publisher warns about the connection itself.
			log.Info("rows are due but the broker is not connected; sweeping when it is back")
		}
		s.waitingForBroker = true
		return
	}
	s.waitingForBroker = false
	start := time.Now()
	var total batchResult
	for ctx.Err() == nil {
		r, err := s.sweepBatch(work, p)
		s.progressed(time.Now())
		total.add(r)
		if err != nil {
			if work.Err() == nil {
				log.Warn("sweep batch failed; next round retries", zap.Error(err))
			}
			break
		}
		if r.claimed < s.cfg.BatchSize {
			break
		}
	}
	if total.claimed > 0 {
		log.Info("swept rows the binlog path did not send", zap.Int("claimed", total.claimed), zap.Int("sent", total.sent),
			zap.Int("retrying", total.retrying), zap.Int("failed", total.failed), zap.Duration("took", time.Since(start)))
	}
}

// batchResult counts one batch.
type batchResult struct{ claimed, sent, retrying, failed int }

func (b *batchResult) add(o batchResult) {
	b.claimed += o.claimed
	b.sent += o.sent
	b.retrying += o.retrying
	b.failed += o.failed
}

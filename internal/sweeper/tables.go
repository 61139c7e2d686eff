package sweeper

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Tables that come and go while the sweeper runs: the tables of a pattern
// entry created, renamed or dropped while the relay streams (pkg/binlog
// tables.go). AddTable and RemoveTable may be called from any goroutine;
// the loop applies them before its next round, so a round never sees a
// half-changed list.

// tableChanges is the queue of additions and removals.
type tableChanges struct {
	mu      sync.Mutex
	pending []tableChange
	follow  bool // tables may be added later: an empty list waits for them
}

type tableChange struct {
	t   *outbox.Table
	add bool
}

// FollowTables tells the sweeper that tables may be added while it runs,
// so it keeps looping with none (a fleet of tenants that starts empty).
func (s *Sweeper) FollowTables() {
	s.changes.mu.Lock()
	s.changes.follow = true
	s.changes.mu.Unlock()
}

// AddTable sweeps t from the next round on (a table already swept under
// its name is left as it is).
func (s *Sweeper) AddTable(t *outbox.Table) {
	s.changes.mu.Lock()
	s.changes.pending = append(s.changes.pending, tableChange{t: t, add: true})
	s.changes.mu.Unlock()
}

// RemoveTable stops sweeping the table called t's name.
func (s *Sweeper) RemoveTable(t *outbox.Table) {
	s.changes.mu.Lock()
	s.changes.pending = append(s.changes.pending, tableChange{t: t})
	s.changes.mu.Unlock()
}

func (s *Sweeper) following() bool {
	s.changes.mu.Lock()
	defer s.changes.mu.Unlock()
	return s.changes.follow
}

// applyTableChanges applies the queued changes to the plans.
func (s *Sweeper) applyTableChanges(ctx context.Context) {
	s.changes.mu.Lock()
	pending := s.changes.pending
	s.changes.pending = nil
	s.changes.mu.Unlock()
	for _, c := range pending {
		name := c.t.FullName()
		at := -1
		for i, p := range s.plans {
			if p.T.FullName() == name {
				at = i
				break
			}
		}
		switch {
		case !c.add && at >= 0:
			s.plans = append(s.plans[:at], s.plans[at+1:]...)
			s.log.Info("table no longer swept: it is gone", zap.String("table", name))
		case c.add && at < 0:
			p, err := newPlan(c.t)
			if errors.Is(err, errNotSweepable) {
				s.log.Info("table not swept", zap.String("table", name), zap.String("reason", err.Error()))
				continue
			}
			if err != nil {
				s.log.Warn("table not swept: its plan could not be built", zap.String("table", name), zap.Error(err))
				continue
			}
			if s.cfg.Archive.Mode == ArchiveMove {
				p.ArchiveTable = ident.Quote(c.t.Schema) + "." + ident.Quote(ArchiveTableName(s.cfg.Archive.Table, c.t.Name))
				if err := s.preparePlan(ctx, p); err != nil {
					s.log.Warn("table not swept: its archive table is not ready", zap.String("table", name), zap.Error(err))
					continue
				}
			}
			s.plans = append(s.plans, p)
			s.log.Info("sweeping", zap.String("table", name), zap.Stringer("claim", p.mode))
		}
	}
}

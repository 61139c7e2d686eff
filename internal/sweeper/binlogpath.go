package sweeper

import (
	"time"

	"go.uber.org/zap"
)

// The sweeper inside `run` runs beside a binlog path, and a row that path
// has not reached yet is not a row it failed. After the process was
// paused (SIGSTOP, a VM frozen, a long stall), or while its reader catches
// up a backlog, rows older than the grace period by the wall clock are
// still on their way through the binlog path; claiming them publishes each
// twice. So the grace period counts from how far the binlog path has come,
// not from now: a row is due once the path's marks are grace_period past
// its commit. Real gaps stay the sweeper's: a reader that hears nothing
// from its source for readerSilent (cut off, failed over, stuck) gives the
// sweeper the plain grace period again; rows of a purged binlog are older
// than anything the reader reads after the gap.
//
// A pause is seen from the sweeper's own rounds: one that comes late (the
// process did not run) claims nothing until the reader has heard from its
// source again, or the grace period has passed since, so the first round
// after SIGCONT does not race the reader waking beside it.

// BinlogPath is how far the binlog path of the sweeper's process has come
// (internal/app implements it over the reader and the relay).
type BinlogPath interface {
	// Progress says when the binlog reader last heard from its source (an
	// event or a heartbeat; zero for never) and how far behind now the
	// binlog path is: every row committed before now-behind is published
	// and marked, or its failure recorded.
	Progress(now time.Time) (received time.Time, behind time.Duration)
}

// SetBinlogPath has the sweeper leave alone the rows p has not reached.
func (s *Sweeper) SetBinlogPath(p BinlogPath) { s.path = p }

const (
	// readerSilent is how long a reader may hear nothing from its source
	// (it gets a heartbeat every second when idle) before the sweeper
	// takes it for cut off and sweeps by the wall clock.
	readerSilent = 10 * time.Second
	// lateSlack is how much later than its interval a round may come
	// before the sweeper takes the process for paused.
	lateSlack = 2 * time.Second
)

// lateLimit is how long the sweeper may go without getting on (between
// rounds, or between two steps of one) before it takes the process for
// paused.
func (s *Sweeper) lateLimit() time.Duration {
	return s.cfg.Interval + max(s.cfg.Interval, lateSlack)
}

// pace sets the grace period of the coming rounds and whether they may
// claim (the rule above); last is when the previous rounds ended.
func (s *Sweeper) pace(now time.Time) {
	late := !s.lastRounds.IsZero() && now.Sub(s.lastRounds) > s.lateLimit()
	s.paceAt(now, late, now.Sub(s.lastRounds)-s.cfg.Interval)
}

// progressed notes a step of the round's work done (a pre-check answered,
// a batch settled, a table done). The longest stretch between two steps
// since the pace tells stalled a pause from work: a round that takes long
// because one table drains a backlog of due retries got on all along.
func (s *Sweeper) progressed(now time.Time) {
	s.longestGap = max(s.longestGap, now.Sub(s.progressAt))
	s.progressAt = now
}

// stalled paces again a round that is about to claim longer after its pace
// than a late round may come: the pre-check's answer and the grace period
// were taken that long ago, and the claim, by the primary's clock now,
// would take every row committed meanwhile that the reader has not
// reached. If the round stopped between two of its steps for that long
// (the process paused while its pre-check was on the wire, or while
// another table drained), it claims nothing more until the reader hears
// from its source again, as a late one. If it got on all along (one
// table's long drain), the reader was not paused either: the grace period
// is taken afresh, with how far behind the binlog path is now, and claims
// go on.
func (s *Sweeper) stalled(now time.Time) {
	if s.path == nil || !s.claims || now.Sub(s.pacedAt) <= s.lateLimit() {
		return
	}
	s.progressed(now)
	s.paceAt(now, s.longestGap > s.lateLimit(), s.longestGap)
}

// paceAt is pace with late decided; lateBy is for the log.
func (s *Sweeper) paceAt(now time.Time, late bool, lateBy time.Duration) {
	s.grace, s.claims, s.pacedAt = s.cfg.GracePeriod, true, now
	s.progressAt, s.longestGap = now, 0
	if s.path == nil {
		return
	}
	received, behind := s.path.Progress(now)
	if late {
		s.pausedAt = now
		s.log.Info("the sweeper's round came late or stalled (the process was paused or starved): no claims until the binlog reader hears from its source again",
			zap.Duration("late_by", lateBy))
	}
	if !s.pausedAt.IsZero() {
		if !received.After(s.pausedAt) && now.Sub(s.pausedAt) < s.cfg.GracePeriod {
			s.claims = false
			return
		}
		s.pausedAt = time.Time{}
	}
	if now.Sub(received) > readerSilent {
		s.noteDeferral(0)
		return
	}
	s.grace += behind
	s.noteDeferral(behind)
}

// noteDeferral logs when the binlog path falls behind by more than the
// grace period, and when it has caught up again.
func (s *Sweeper) noteDeferral(behind time.Duration) {
	switch far := behind > s.cfg.GracePeriod; {
	case far && !s.deferring:
		s.log.Info("the binlog path is behind: rows committed since its last marks are left to it, the grace period counts from there",
			zap.Duration("behind", behind.Round(time.Second)), zap.Duration("grace_period", s.cfg.GracePeriod))
	case !far && s.deferring:
		s.log.Info("the binlog path has caught up: the grace period counts from now again")
	}
	s.deferring = behind > s.cfg.GracePeriod
}

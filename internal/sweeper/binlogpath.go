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

// pace sets the grace period of the coming rounds and whether they may
// claim (the rule above); last is when the previous rounds ended.
func (s *Sweeper) pace(now time.Time) {
	late := !s.lastRounds.IsZero() && now.Sub(s.lastRounds) > s.cfg.Interval+max(s.cfg.Interval, lateSlack)
	s.paceAt(now, late, now.Sub(s.lastRounds)-s.cfg.Interval)
}

// stalled paces again a round that stopped between its pace and a claim
// for longer than a late round may (the process paused while its pre-check
// was on the wire, or while another table drained): the pre-check's answer
// and the grace period were taken before the pause, and the claim, by the
// primary's clock after it, would take every row committed meanwhile,
// which the reader has not reached. Such a round claims nothing more until
// the reader hears from its source again, as a late one.
func (s *Sweeper) stalled(now time.Time) {
	if s.path == nil || !s.claims || now.Sub(s.pacedAt) <= s.cfg.Interval+max(s.cfg.Interval, lateSlack) {
		return
	}
	s.paceAt(now, true, now.Sub(s.pacedAt))
}

// paceAt is pace with late decided; lateBy is for the log.
func (s *Sweeper) paceAt(now time.Time, late bool, lateBy time.Duration) {
	s.grace, s.claims, s.pacedAt = s.cfg.GracePeriod, true, now
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

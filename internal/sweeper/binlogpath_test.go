package sweeper

import (
	"testing"
	"time"

	"go.uber.org/zap"
)

// fakePath is a binlog path heard from at received, behind by behind.
type fakePath struct {
	received time.Time
	behind   time.Duration
}

func (p *fakePath) Progress(time.Time) (time.Time, time.Duration) { return p.received, p.behind }

// The grace period of the sweeper inside `run` counts from how far its
// binlog path has come; a reader that hears nothing gives it the wall
// clock back; a round that comes late (the process was paused) claims
// nothing until the reader hears from its source again, or for the grace
// period at most.
func TestSweeperGraceFollowsTheBinlogPath(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cfg := Config{Interval: time.Second, GracePeriod: 10 * time.Second}
	path := &fakePath{}
	s := &Sweeper{cfg: cfg, log: zap.NewNop()}
	check := func(step string, now time.Time, grace time.Duration, claims bool) {
		t.Helper()
		s.pace(now)
		if s.grace != grace || s.claims != claims {
			t.Fatalf("%s: grace %s, claims %v; want %s, %v", step, s.grace, s.claims, grace, claims)
		}
		s.lastRounds = now
	}
	check("no binlog path (the sweep command)", t0, 10*time.Second, true)

	s.SetBinlogPath(path)
	path.received, path.behind = t0.Add(time.Second), 0
	check("caught up", t0.Add(time.Second), 10*time.Second, true)
	path.received, path.behind = t0.Add(2*time.Second), 30*time.Second
	check("30 s behind, reading", t0.Add(2*time.Second), 40*time.Second, true)
	s.lastRounds = t0.Add(12 * time.Second) // rounds went on every second
	check("the reader silent past 10 s: cut off", t0.Add(13*time.Second), 10*time.Second, true)

	// Paused 40 s: the first round after comes late.
	path.received, path.behind = t0.Add(14*time.Second), 0
	s.lastRounds = t0.Add(14 * time.Second)
	woke := t0.Add(54 * time.Second)
	check("the round after the pause", woke, 10*time.Second, false)
	check("the reader not heard from since", woke.Add(time.Second), 10*time.Second, false)
	path.received, path.behind = woke.Add(1500*time.Millisecond), 41*time.Second
	check("the reader reads again, 41 s behind", woke.Add(2*time.Second), 51*time.Second, true)

	// Paused, and the reader never hears from its source again: claims
	// wait for the grace period, then the wall clock rules.
	s.lastRounds = woke.Add(2 * time.Second)
	again := woke.Add(60 * time.Second)
	check("paused again", again, 10*time.Second, false)
	s.lastRounds = again.Add(10 * time.Second)
	check("grace period over, nothing heard", again.Add(11*time.Second), 10*time.Second, true)
}

// A round paced before a pause and acting after it (the pre-check on the
// wire when the process stopped) is paced again before it claims: its
// grace period and the pre-check's answer predate the pause, and the
// claim would take the rows committed meanwhile, which the reader has not
// reached (TestPausedRelayDoesNotSweepItsOwnBacklog failed so under
// load). A round that acts soon after its pace is left as it is.
func TestSweeperRoundStalledBeforeItsClaimsIsPacedAgain(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	cfg := Config{Interval: 200 * time.Millisecond, GracePeriod: 3 * time.Second}
	s, path := pacedOnTime(t, t0, cfg)
	s.stalled(t0.Add(time.Second))
	if !s.claims {
		t.Fatal("a round acting a second after its pace may not claim")
	}
	woke := t0.Add(8 * time.Second)
	s.stalled(woke)
	if s.claims {
		t.Fatal("a round stalled 8 s between its pace and its claims claims")
	}
	// The reader hears from its source after the pause: the next round claims.
	path.received = woke.Add(500 * time.Millisecond)
	s.lastRounds = woke.Add(time.Second)
	s.pace(woke.Add(time.Second + cfg.Interval))
	if !s.claims {
		t.Fatal("the round after the reader heard from its source again may not claim")
	}
}

// pacedOnTime is a sweeper whose round came on time at t0, the binlog
// reader having heard from its source then: it may claim.
func pacedOnTime(t *testing.T, t0 time.Time, cfg Config) (*Sweeper, *fakePath) {
	t.Helper()
	path := &fakePath{received: t0}
	s := &Sweeper{cfg: cfg, log: zap.NewNop()}
	s.SetBinlogPath(path)
	s.lastRounds = t0.Add(-cfg.Interval)
	s.pace(t0)
	if !s.claims {
		t.Fatal("a round on time may not claim")
	}
	return s, path
}

// One table's drain that takes longer than a late round may (30 s of due
// retries, a batch settled every 2 s) is work, not a pause: the reader
// heard from its source all along. The next table's claim is paced afresh,
// with the binlog path's lag now, and goes on; before, it was taken for a
// pause, and claims were off for every later table of the round (of every
// round, when the first table drains so each time).
func TestALongDrainOfOneTableIsNotTakenForAPause(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	cfg := Config{Interval: 5 * time.Second, GracePeriod: time.Minute}
	s, path := pacedOnTime(t, t0, cfg)
	s.progressed(t0.Add(100 * time.Millisecond)) // the pre-check answered
	// Table 1 drains for 30 s; the reader hears from its source every
	// second and falls 3 s behind.
	now := t0
	for range 15 {
		now = now.Add(2 * time.Second)
		s.progressed(now)
	}
	path.received, path.behind = now.Add(-500*time.Millisecond), 3*time.Second
	s.stalled(now) // table 2 is due
	if !s.claims {
		t.Fatal("table 2 is not claimed: a 30 s drain of table 1, the reader live throughout, was taken for a pause")
	}
	if want := cfg.GracePeriod + 3*time.Second; s.grace != want {
		t.Errorf("grace %s, want %s (paced afresh with the binlog path's lag now)", s.grace, want)
	}
	if !s.pausedAt.IsZero() {
		t.Error("a pause was recorded")
	}
}

// A pause between two steps of a round (the process stopped 20 s in the
// middle of table 1's drain) still stops the claims of the tables after
// it, although the drain got on again after the pause: the grace period
// taken before it would claim rows the reader has not reached.
func TestAPauseInsideOneTablesDrainStillStopsClaims(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	cfg := Config{Interval: 5 * time.Second, GracePeriod: time.Minute}
	s, path := pacedOnTime(t, t0, cfg)
	s.progressed(t0.Add(2 * time.Second))
	s.progressed(t0.Add(4 * time.Second))
	woke := t0.Add(24 * time.Second) // paused 20 s in a batch
	s.progressed(woke)
	s.progressed(woke.Add(2 * time.Second))
	s.stalled(woke.Add(2 * time.Second))
	if s.claims {
		t.Fatal("table 2 claims after a 20 s pause in table 1's drain, before the reader heard from its source again")
	}
	// The reader hears from its source after the pause: the next round claims.
	path.received = woke.Add(3 * time.Second)
	s.lastRounds = woke.Add(4 * time.Second)
	s.pace(woke.Add(4*time.Second + cfg.Interval))
	if !s.claims {
		t.Fatal("the round after the reader heard from its source again may not claim")
	}
}

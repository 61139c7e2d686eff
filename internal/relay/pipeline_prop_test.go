package relay

// Property tests of the pipeline core: random transactions and broker
// outcomes drive the real pipeline (route, lane merge, committer,
// recorder, publishing ids) and the real stream lane state machine
// (streamlane.Restarting over the scripted broker of streamlanetest), with
// restarts from the last saved checkpoint, in a testing/synctest bubble (the
// pipeline's timers run on the bubble's clock). After every step the
// invariants a user relies on are checked; a failing schedule is shrunk by
// rapid to a minimal one, and each one found is kept below as a named
// regression test.

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// propRow is one outbox row of a schedule. A requeue row is an UPDATE that
// makes a row publishable again: an event only while the statuses make it
// one (the setting requeues), so it moves the numbering of the rows after
// it.
type propRow struct {
	id         int
	key        string
	statusless bool
	requeue    bool
}

// propTx is one source transaction: its rows and the position after its
// commit.
type propTx struct {
	rows []propRow
	pos  uint32
	// openXA: a prepared XA branch with outbox rows is open after this
	// transaction (Commit.OpenXA: the reader holds its rows until its XA
	// COMMIT, a later transaction that carries them).
	openXA bool
}

// stepKind is one thing that happens to the pipeline.
type stepKind int

const (
	stepConfirm   stepKind = iota // the broker confirms some messages of a lane
	stepRefuse                    // the broker refuses the messages waiting on a lane (a publish error)
	stepCut                       // a lane's connection is lost, some messages stored unconfirmed
	stepBlackhole                 // no answer past the confirm timeout
	stepTick                      // time passes (flushes, saves)
	stepRestart                   // the relay stops (gracefully or not) and starts from its checkpoint
	stepLeaseLost                 // the leader pauses past its lease, then wakes
)

func (k stepKind) String() string {
	return [...]string{"confirm", "refuse", "cut", "blackhole", "tick", "restart", "lease-lost"}[k]
}

type step struct {
	kind     stepKind
	lane     int
	n        int
	reversed bool // confirms of a batch in reverse order
	graceful bool
	// requeues is the setting at a restart: whether requeue rows are events.
	requeues bool
}

func (s step) String() string {
	switch s.kind {
	case stepConfirm:
		return fmt.Sprintf("confirm(lane %d, %d, reversed %v)", s.lane, s.n, s.reversed)
	case stepRefuse:
		return fmt.Sprintf("refuse(lane %d)", s.lane)
	case stepCut:
		return fmt.Sprintf("cut(lane %d, %d stored unconfirmed)", s.lane, s.n)
	case stepRestart:
		return fmt.Sprintf("restart(graceful %v, requeues %v)", s.graceful, s.requeues)
	}
	return s.kind.String()
}

// schedule is one generated case.
type schedule struct {
	lanes    int
	requeues bool // the setting at the first start
	txs      []propTx
	steps    []step
}

func (s schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lanes=%d requeues=%v\n", s.lanes, s.requeues)
	for _, x := range s.txs {
		fmt.Fprintf(&b, "  tx pos=%d rows=%v openXA=%v\n", x.pos, x.rows, x.openXA)
	}
	for _, st := range s.steps {
		fmt.Fprintf(&b, "  %s\n", st)
	}
	return b.String()
}

func drawSchedule(t *rapid.T) schedule {
	s := schedule{lanes: rapid.IntRange(1, 3).Draw(t, "lanes"), requeues: rapid.Bool().Draw(t, "requeues")}
	ntx := rapid.IntRange(1, 8).Draw(t, "txs")
	id := 0
	for i := range ntx {
		x := propTx{pos: uint32(100 * (i + 1))}
		nrows := rapid.IntRange(0, 4).Draw(t, "rows")
		if rapid.IntRange(0, 9).Draw(t, "large") == 0 {
			nrows = rapid.IntRange(10, 30).Draw(t, "large-rows") // more than the buffers and windows hold
		}
		for range nrows {
			id++
			x.rows = append(x.rows, propRow{id: id, key: fmt.Sprintf("k%d", rapid.IntRange(0, 3).Draw(t, "key")),
				statusless: rapid.Bool().Draw(t, "statusless"), requeue: rapid.IntRange(0, 4).Draw(t, "requeue") == 0})
		}
		s.txs = append(s.txs, x)
	}
	// An XA branch prepared after transaction i and committed in
	// transaction j (which then carries rows): the transactions from i to
	// j-1 leave it open.
	if ntx > 1 && rapid.IntRange(0, 3).Draw(t, "xa") == 0 {
		i := rapid.IntRange(0, ntx-2).Draw(t, "xa-prepare")
		j := rapid.IntRange(i+1, ntx-1).Draw(t, "xa-commit")
		for k := i; k < j; k++ {
			s.txs[k].openXA = true
		}
	}
	nsteps := rapid.IntRange(1, 25).Draw(t, "steps")
	for range nsteps {
		st := step{kind: stepKind(rapid.IntRange(0, int(stepLeaseLost)).Draw(t, "kind"))}
		switch st.kind {
		case stepConfirm:
			st.lane = rapid.IntRange(0, s.lanes-1).Draw(t, "lane")
			st.n = rapid.IntRange(1, 8).Draw(t, "n")
			st.reversed = rapid.Bool().Draw(t, "reversed")
		case stepRefuse:
			st.lane = rapid.IntRange(0, s.lanes-1).Draw(t, "lane")
		case stepCut:
			st.lane = rapid.IntRange(0, s.lanes-1).Draw(t, "lane")
			st.n = rapid.IntRange(0, 4).Draw(t, "stored")
		case stepRestart:
			st.graceful = rapid.Bool().Draw(t, "graceful")
			st.requeues = rapid.Bool().Draw(t, "requeues-after")
		}
		s.steps = append(s.steps, st)
	}
	return s
}

// TestPropertyPipeline runs generated schedules. rapid runs
// -rapid.checks cases per Check (100, a fifth with -short): fifty Checks
// make 1,000 schedules with -short, 5,000 without.
func TestPropertyPipeline(t *testing.T) {
	for range 50 {
		if t.Failed() {
			return
		}
		rapid.Check(t, func(rt *rapid.T) {
			s := drawSchedule(rt)
			if err := runSchedule(t, s); err != nil {
				rt.Fatalf("%v\nschedule:\n%s", err, s)
			}
		})
	}
}

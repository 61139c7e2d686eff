package rowstatus_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
)

func TestCadenceBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   rowstatus.Cadence
		min  int
		max  int
	}{
		{"defaults from batch_size", rowstatus.Cadence{MaxBatch: 1000, MaxUnmarked: 1024}, 250, 512},
		{"batches at most half the ceiling", rowstatus.Cadence{MaxBatch: 1000, MaxUnmarked: 300}, 150, 150},
		{"min above max is max", rowstatus.Cadence{MinBatch: 50, MaxBatch: 10, MaxUnmarked: 1024}, 10, 10},
		{"zeros are one", rowstatus.Cadence{}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rowstatus.NewCadence(tc.in)
			if c.MinBatch != tc.min || c.MaxBatch != tc.max || c.Target() != tc.min {
				t.Fatalf("min %d max %d target %d; want min %d max %d, target at min", c.MinBatch, c.MaxBatch, c.Target(), tc.min, tc.max)
			}
		})
	}
}

// The batch doubles while the replica lags or the writer is busy, up to
// batch_size, halves back when it keeps up, and the longest wait follows.
func TestCadenceAdapts(t *testing.T) {
	c := rowstatus.NewCadence(rowstatus.Cadence{MinBatch: 100, MaxBatch: 800, MaxUnmarked: 1600,
		Interval: 100 * time.Millisecond, MaxInterval: 800 * time.Millisecond})
	var got []int
	for _, lagging := range []bool{true, true, true, true, false, false, false, false} {
		lag := time.Duration(0)
		if lagging {
			lag = 3 * time.Second
		}
		c.Adapt(lag, false)
		got = append(got, c.Target())
	}
	want := []int{200, 400, 800, 800, 400, 200, 100, 100}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("targets %v; want %v", got, want)
		}
	}
	c.Adapt(0, true)
	if c.Target() != 200 || c.Wait() != 200*time.Millisecond {
		t.Fatalf("a busy writer: target %d wait %v; want 200 and 200ms", c.Target(), c.Wait())
	}
}

func TestCadenceFullAndAdmit(t *testing.T) {
	c := rowstatus.NewCadence(rowstatus.Cadence{MinBatch: 100, MaxBatch: 500, MaxUnmarked: 1024})
	for _, tc := range []struct {
		pending, unmarked int
		full, admit       bool
	}{
		{0, 0, false, true},
		{99, 99, false, true},
		{100, 100, true, true},
		{10, 1023, false, true}, // 1013 handed to the writer: one more fits
		{10, 1024, true, false}, // at the ceiling: hand over, and wait
		{0, 1024, false, false}, // nothing to hand: wait for the writer
	} {
		if f, a := c.Full(tc.pending, tc.unmarked), c.Admit(tc.unmarked); f != tc.full || a != tc.admit {
			t.Errorf("pending %d unmarked %d: full %v admit %v; want %v %v", tc.pending, tc.unmarked, f, a, tc.full, tc.admit)
		}
	}
}

// markModel is the committer and the recorder around a Cadence, as the
// relay runs them: rows are confirmed in binlog order, gathered, handed
// over in batches with the position reached, written in order, and the
// checkpoint moves to a written batch's position.
type markModel struct {
	c       *rowstatus.Cadence
	next    int   // the next row's position (1, 2, ...)
	pending []int // confirmed, gathered
	handed  [][]int
	marked  map[int]bool
	cp      int // checkpoint: every row at or before it is confirmed
	waiting bool
}

func (m *markModel) unmarked() int {
	n := len(m.pending)
	for _, b := range m.handed {
		n += len(b)
	}
	return n
}

func (m *markModel) hand(lag time.Duration) {
	if len(m.pending) == 0 {
		return
	}
	busy := len(m.handed) > 0
	m.handed = append(m.handed, m.pending)
	m.pending = nil
	m.c.Adapt(lag, busy)
}

// confirm is a confirm arriving: taken if the ceiling allows, else the
// committer hands over what it has and waits (the confirm stays queued).
func (m *markModel) confirm(lag time.Duration) {
	if !m.c.Admit(m.unmarked()) {
		m.hand(lag)
		m.waiting = true
		return
	}
	m.waiting = false
	m.pending = append(m.pending, m.next)
	m.next++
	if m.c.Full(len(m.pending), m.unmarked()) {
		m.hand(lag)
	}
}

func (m *markModel) write() {
	if len(m.handed) == 0 {
		return
	}
	b := m.handed[0]
	m.handed = m.handed[1:]
	for _, p := range b {
		m.marked[p] = true
	}
	m.cp = b[len(b)-1]
}

func (m *markModel) check(t *rapid.T) {
	if u := m.unmarked(); u > m.c.MaxUnmarked {
		t.Fatalf("%d confirmed rows unmarked; the ceiling is %d", u, m.c.MaxUnmarked)
	}
	if m.c.Target() < m.c.MinBatch || m.c.Target() > m.c.MaxBatch || m.c.Target() > m.c.MaxUnmarked {
		t.Fatalf("target %d outside [%d, %d] or over the ceiling %d", m.c.Target(), m.c.MinBatch, m.c.MaxBatch, m.c.MaxUnmarked)
	}
	for p := 1; p <= m.cp; p++ {
		if !m.marked[p] {
			t.Fatalf("checkpoint at row %d passes row %d, not marked", m.cp, p)
		}
	}
	if w := m.c.Wait(); w < m.c.Interval || w > m.c.MaxInterval {
		t.Fatalf("wait %v outside [%v, %v]", w, m.c.Interval, m.c.MaxInterval)
	}
}

// TestCadenceProperties: over random schedules of confirms, timer ticks,
// writes and replica lag, never more than max_unmarked confirmed rows wait
// unmarked, the checkpoint never passes an unmarked row, the target stays
// in bounds, and once the confirms stop every confirmed row is marked and
// the checkpoint reaches the last one.
func TestCadenceProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxBatch := rapid.IntRange(1, 64).Draw(t, "max_batch")
		c := rowstatus.NewCadence(rowstatus.Cadence{
			MinBatch:    rapid.IntRange(0, 16).Draw(t, "min_batch"),
			MaxBatch:    maxBatch,
			MaxUnmarked: rapid.IntRange(1, 96).Draw(t, "max_unmarked"),
			Interval:    10 * time.Millisecond, MaxInterval: 80 * time.Millisecond,
		})
		m := &markModel{c: c, next: 1, marked: map[int]bool{}}
		lag := time.Duration(0)
		steps := rapid.SliceOfN(rapid.IntRange(0, 9), 1, 400).Draw(t, "steps")
		for _, s := range steps {
			switch {
			case s < 5:
				m.confirm(lag)
			case s < 6:
				m.hand(lag) // the timer
			case s < 8:
				m.write()
			case s < 9:
				lag = 0
			default:
				lag = 5 * time.Second
			}
			m.check(t)
		}
		// The stream stops: the drain hands over the rest and the writer
		// writes everything.
		m.hand(lag)
		for len(m.handed) > 0 {
			m.write()
			m.check(t)
		}
		if last := m.next - 1; last > 0 && m.cp != last {
			t.Fatalf("drained: checkpoint at %d; want the last row, %d", m.cp, last)
		}
		for p := 1; p < m.next; p++ {
			if !m.marked[p] {
				t.Fatalf("drained: row %d never marked", p)
			}
		}
	})
}

package relay

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"pgregory.net/rapid"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// sessionsMarker is a primary the recorder marks many tables on at once:
// it keeps what each table was marked with, fails the statements it was
// told to (a broken connection once, then taken; or the table missing),
// and notes how many statements ran at once, overall and per table.
type sessionsMarker struct {
	mu      sync.Mutex
	marked  map[*outbox.Table][]any // ids, in the order their statements landed
	missing map[*outbox.Table]bool  // renamed away: every mark fails 1146
	breaks  map[*outbox.Table]int   // statements still to fail with a broken connection
	running map[*outbox.Table]int
	now     int // statements running
	most    int // the most that ran at once
	twice   string
}

func (m *sessionsMarker) MarkSent(_ context.Context, t *outbox.Table, marks rowstatus.Marks) (int64, error) {
	m.mu.Lock()
	m.now++
	m.running[t]++
	m.most = max(m.most, m.now)
	if m.running[t] > 1 && m.twice == "" {
		m.twice = fmt.Sprintf("two statements marked %s at once", t.FullName())
	}
	m.mu.Unlock()
	runtime.Gosched() // let the other sessions' statements run meanwhile
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now--
	m.running[t]--
	switch {
	case m.missing[t]:
		return 0, &mysql.MySQLError{Number: 1146, Message: fmt.Sprintf("Table '%s' doesn't exist", t.FullName())}
	case m.breaks[t] > 0:
		m.breaks[t]--
		return 0, errors.New("invalid connection")
	}
	m.marked[t] = append(m.marked[t], marks.IDs...)
	return int64(len(marks.IDs)), nil
}

func (m *sessionsMarker) MarkRetryMany(context.Context, *outbox.Table, rowstatus.Attempt, rowstatus.Marks) (rowstatus.Outcome, int64, error) {
	return rowstatus.Skipped, 0, errors.New("no failures in this schedule")
}

// checkingStore checks, at each save, that every row of every batch at or
// before the saved position is marked, or kept with the recent marks where
// its table is missing.
type checkingStore struct {
	check func(pos uint32) error
	err   error
	saves int
}

func (s *checkingStore) Save(_ context.Context, c checkpoint.Checkpoint) error {
	s.saves++
	if s.err == nil {
		s.err = s.check(c.Pos)
	}
	return nil
}

// A batch's marks over many tables run side by side on up to
// relay.mark_sessions connections (recorder.markAll). Over generated
// batches of 1 to 8 tables, 1 to 5 sessions, statements that break once
// and tables that are missing: every checkpoint saved comes after every
// row at or before its position is marked (or, in a missing table, kept
// for a rename to write where the rows went); no table is marked by two
// statements at once; no more statements run at once than the sessions;
// each table's rows are marked once, in batch order.
func TestPropertyRecorderMarksEveryTableBeforeItsPosition(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tb := presetTable(t, "producer-message", "")
		r, _ := testRelay(t, tb, "")
		r.cfg.MarkSessions = rapid.IntRange(1, 5).Draw(rt, "sessions")
		nTables := rapid.IntRange(1, 8).Draw(rt, "tables")
		tables := make([]*outbox.Table, nTables)
		m := &sessionsMarker{marked: map[*outbox.Table][]any{}, missing: map[*outbox.Table]bool{},
			breaks: map[*outbox.Table]int{}, running: map[*outbox.Table]int{}}
		breaks := 0
		for i := range tables {
			c := *tb
			c.Schema = fmt.Sprintf("tenant_%d", i)
			tables[i] = &c
			m.missing[&c] = rapid.Float64Range(0, 1).Draw(rt, fmt.Sprintf("missing_%d", i)) < 0.15
			// A broken connection costs the retry's backoff (100 ms): one
			// in a few histories.
			if breaks == 0 && rapid.Float64Range(0, 1).Draw(rt, fmt.Sprintf("breaks_%d", i)) < 0.03 {
				m.breaks[&c], breaks = 1, 1
			}
		}
		r.marker = m

		type written struct {
			pos  uint32
			want map[*outbox.Table][]any
		}
		var done []written
		store := &checkingStore{check: func(pos uint32) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			want := map[*outbox.Table][]any{}
			for _, b := range done {
				if b.pos > pos {
					break
				}
				for t, ids := range b.want {
					want[t] = append(want[t], ids...)
				}
			}
			for t, ids := range want {
				if m.missing[t] {
					continue
				}
				if got := m.marked[t]; fmt.Sprint(got[:min(len(got), len(ids))]) != fmt.Sprint(ids) {
					return fmt.Errorf("checkpoint at %d saved with %s marked %v, want %v", pos, t.FullName(), got, ids)
				}
			}
			return nil
		}}
		r.store = store
		w := &recorder{r: r}
		next := 1
		nBatches := rapid.IntRange(1, 10).Draw(rt, "batches")
		for bi := range nBatches {
			b := batch{marks: map[*outbox.Table]*rowstatus.Marks{}}
			want := map[*outbox.Table][]any{}
			for i, tt := range tables {
				rows := rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("rows_%d_%d", bi, i))
				if rows == 0 {
					continue
				}
				b.marks[tt] = &rowstatus.Marks{}
				for range rows {
					b.marks[tt].Add(next, fmt.Sprintf("m-%d", next))
					want[tt] = append(want[tt], next)
					next++
				}
			}
			pos := binlog.Position{Pos: uint32(100 * (bi + 1))}
			b.pos = &pos
			done = append(done, written{pos: pos.Pos, want: want})
			if err := w.write(context.Background(), b); err != nil {
				rt.Fatalf("batch %d: %v", bi, err)
			}
			if store.err != nil {
				rt.Fatal(store.err)
			}
			if store.saves != bi+1 {
				rt.Fatalf("batch %d: %d checkpoints saved, want one per batch", bi, store.saves)
			}
		}
		if m.twice != "" {
			rt.Fatal(m.twice)
		}
		if m.most > r.cfg.MarkSessions {
			rt.Fatalf("%d statements ran at once, over relay.mark_sessions %d", m.most, r.cfg.MarkSessions)
		}
		// Every row once, in batch order; a missing table's rows kept for a
		// rename.
		for _, tt := range tables {
			var want []any
			for _, b := range done {
				want = append(want, b.want[tt]...)
			}
			if m.missing[tt] {
				if kept := w.recent[tt]; len(want) > 0 && (kept == nil || kept.ids != len(want)) {
					rt.Fatalf("%s is missing: %d rows kept for a rename, want %d", tt.FullName(), recentIDs(kept), len(want))
				}
				continue
			}
			if fmt.Sprint(m.marked[tt]) != fmt.Sprint(want) {
				rt.Fatalf("%s marked %v, want %v", tt.FullName(), m.marked[tt], want)
			}
		}
	})
}

func recentIDs(l *recentList) int {
	if l == nil {
		return 0
	}
	return l.ids
}

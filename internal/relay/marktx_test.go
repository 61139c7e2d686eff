package relay

import (
	"context"
	"database/sql/driver"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// txMarker is a primary's tables (tablesMarker) that writes a group of
// marks as one transaction: the group fails whole with the next of fails,
// if any, before any row moves. calls lists the writes, "one <table>" or
// "together <n>".
type txMarker struct {
	tables tablesMarker
	fails  []error
	calls  []string
	// before runs at each write, before it applies (an observer check).
	before func()
}

func (m *txMarker) MarkSent(ctx context.Context, t *outbox.Table, marks rowstatus.Marks) (int64, error) {
	m.calls = append(m.calls, "one "+t.FullName())
	return m.tables.MarkSent(ctx, t, marks)
}

func (m *txMarker) MarkSentTogether(ctx context.Context, groups []rowstatus.TableMarks) ([]rowstatus.Marked, error) {
	m.calls = append(m.calls, fmt.Sprint("together ", len(groups)))
	if m.before != nil {
		m.before()
	}
	if len(m.fails) > 0 {
		err := m.fails[0]
		m.fails = m.fails[1:]
		return nil, err
	}
	return markEach(ctx, m.tables.MarkSent, groups)
}

func (m *txMarker) MarkRetryMany(ctx context.Context, t *outbox.Table, a rowstatus.Attempt, rows rowstatus.Marks) (rowstatus.Outcome, int64, error) {
	return m.tables.MarkRetryMany(ctx, t, a, rows)
}

// markCounter counts the observer's marks by table.
type markCounter struct {
	nopObserver
	mu           sync.Mutex
	marked, dups map[string]int64
}

func (o *markCounter) Marked(t *outbox.Table, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.marked[t.FullName()] += n
}

func (o *markCounter) AlreadySent(t *outbox.Table, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dups[t.FullName()] += n
}

func (o *markCounter) total() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for _, v := range o.marked {
		n += v
	}
	return n
}

// tenantTables are n copies of tb in schemas tenant_0001... and, for each,
// the marks of rows 1-3 (row 3 SENT already on the primary).
func tenantTables(tb *outbox.Table, n int) (tablesMarker, map[*outbox.Table]*rowstatus.Marks) {
	tables, marks := tablesMarker{}, map[*outbox.Table]*rowstatus.Marks{}
	for i := 1; i <= n; i++ {
		t := *tb
		t.Schema = fmt.Sprintf("tenant_%04d", i)
		rows := pendingRows(3, "m-")
		rows[3].status = "SENT"
		tables[t.FullName()] = rows
		m := &rowstatus.Marks{}
		for id := 1; id <= 3; id++ {
			m.Add(id, fmt.Sprint("m-", id))
		}
		marks[&t] = m
	}
	return tables, marks
}

// A batch's marks over several tables are one write, in table order; a
// table missing on the primary among them is kept for a rename and the
// others count, per table, once the write returned.
func TestMarksOfSeveralTablesAreOneTransaction(t *testing.T) {
	tb := markedTable(t)
	r, logs := testRelay(t, tb, "")
	obs := &markCounter{marked: map[string]int64{}, dups: map[string]int64{}}
	r.cfg.Observer = obs
	tables, marks := tenantTables(tb, 4)
	delete(tables, "tenant_0003.producer_message") // dropped with its tenant
	m := &txMarker{tables: tables}
	m.before = func() {
		if obs.total() != 0 || r.Stats.Marked.Load() != 0 {
			t.Error("marks counted before their transaction returned")
		}
	}
	r.marker = m
	w := &recorder{r: r}
	if err := w.write(context.Background(), batch{marks: marks}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.calls, []string{"together 4"}) {
		t.Fatalf("writes %q; want one transaction of 4 tables", m.calls)
	}
	if got := r.Stats.Marked.Load(); got != 6 {
		t.Fatalf("Stats.Marked %d; want 6 (rows 1-2 of the 3 tables that exist)", got)
	}
	if got := r.Stats.AlreadySent.Load(); got != 3 {
		t.Fatalf("Stats.AlreadySent %d; want 3 (row 3 of each table that exists)", got)
	}
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("tenant_%04d.producer_message", i)
		want, wantDup := int64(2), int64(1)
		if i == 3 {
			want, wantDup = 0, 0
		}
		if obs.marked[name] != want || obs.dups[name] != wantDup {
			t.Errorf("%s: observed %d marked, %d already sent; want %d, %d", name, obs.marked[name], obs.dups[name], want, wantDup)
		}
		if i != 3 && tables.statuses(name) != "1:SENT 2:SENT 3:SENT" {
			t.Errorf("%s: %s; want every row SENT", name, tables.statuses(name))
		}
	}
	for tt := range marks {
		if w.recent[tt] == nil {
			t.Errorf("%s: marks not kept for a rename", tt.FullName())
		}
	}
	if logs.FilterMessageSnippet("the outbox table does not exist").Len() != 1 {
		t.Fatal("the missing table was not reported once")
	}
}

// One table's marks stay one autocommit statement.
func TestMarksOfOneTableAreOneStatement(t *testing.T) {
	tb := markedTable(t)
	r, _ := testRelay(t, tb, "")
	tables, marks := tenantTables(tb, 1)
	m := &txMarker{tables: tables}
	r.marker = m
	if err := (&recorder{r: r}).write(context.Background(), batch{marks: marks}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.calls, []string{"one tenant_0001.producer_message"}) || r.Stats.Marked.Load() != 2 {
		t.Fatalf("writes %q, %d marked; want one statement marking 2", m.calls, r.Stats.Marked.Load())
	}
}

// A group the primary refuses (a deadlock, a lost connection, anything
// else) is written again whole, and counted once, when it lands; the
// checkpoint of its batch is saved only after it.
func TestARefusedGroupIsWrittenAgainAndCountedOnce(t *testing.T) {
	tb := markedTable(t)
	r, _ := testRelay(t, tb, "")
	obs := &markCounter{marked: map[string]int64{}, dups: map[string]int64{}}
	r.cfg.Observer = obs
	j := &journal{}
	r.store = &fakeStore{j: j}
	tables, marks := tenantTables(tb, 3)
	m := &txMarker{tables: tables, fails: []error{
		&mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"},
		driver.ErrBadConn,
		fmt.Errorf("committing the marks' transaction: %w", mysql.ErrInvalidConn),
	}}
	m.before = func() {
		if len(j.all()) != 0 {
			t.Error("the checkpoint was saved before the marks of its batch")
		}
		if obs.total() != 0 {
			t.Error("marks counted before their transaction committed")
		}
	}
	r.marker = m
	pos := binlog.Position{Flavor: binlog.FlavorMariaDB, File: "bin.000001", Pos: 700}
	if err := (&recorder{r: r}).write(context.Background(), batch{marks: marks, pos: &pos}); err != nil {
		t.Fatal(err)
	}
	if len(m.calls) != 4 {
		t.Fatalf("writes %q; want the group 3 times refused, then written", m.calls)
	}
	if r.Stats.Marked.Load() != 6 || obs.total() != 6 || r.Stats.AlreadySent.Load() != 3 {
		t.Fatalf("%d marked (observed %d), %d already sent; want 6 and 3, counted once", r.Stats.Marked.Load(), obs.total(), r.Stats.AlreadySent.Load())
	}
	if cps := j.checkpoints(); len(cps) != 1 || cps[0] != 700 {
		t.Fatalf("checkpoints %v; want 700 once, after the marks", cps)
	}
}

// More tables than maxMarkStatements in one batch are written in
// transactions of at most that many statements.
func TestMarksTransactionsAreCapped(t *testing.T) {
	tb := markedTable(t)
	r, _ := testRelay(t, tb, "")
	tables, marks := tenantTables(tb, maxMarkStatements+1)
	m := &txMarker{tables: tables}
	r.marker = m
	if err := (&recorder{r: r}).write(context.Background(), batch{marks: marks}); err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprint("together ", maxMarkStatements), "together 1"}
	if !slices.Equal(m.calls, want) || r.Stats.Marked.Load() != 2*int64(maxMarkStatements+1) {
		t.Fatalf("writes %q, %d marked; want %q, %d", m.calls, r.Stats.Marked.Load(), want, 2*(maxMarkStatements+1))
	}
}

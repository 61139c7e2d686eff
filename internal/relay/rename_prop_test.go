package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"pgregory.net/rapid"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/tablerename"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// A property test of following renames: a primary whose outbox table
// "shop.producer_message" goes through random renames (one-step and
// two-step cut-overs, archival rotation, a rename away and back, ALTER ...
// RENAME with a table created after, archives renamed on, old tables
// dropped) while rows are inserted; a binlog reader that reads the same
// history later, at a random pace, through the real rename tracker
// (internal/tablerename) into the real committer and recorder, whose
// status writes meet the primary as it is when they run. After every step
// no row is SENT that was not published (no mark lands on another row);
// whenever the reader has caught up and the recorder has written
// everything, every published row is SENT where it lives and in the copy
// under the configured name, if that table holds one, and every row whose
// publish failed has its retry recorded there: no mark or failure record
// was lost, and none waits for a rename that never comes.

// physTable is one table of the fake primary; rows by id.
type physTable struct {
	rows   map[int]*fakeRow
	nextID int
}

func (p *physTable) clone() *physTable {
	c := &physTable{rows: map[int]*fakeRow{}, nextID: p.nextID}
	for id, r := range p.rows {
		cp := *r
		c.rows[id] = &cp
	}
	return c
}

// renamePrimary is the fake primary: names to tables. It is the relay's
// Marker: a write goes to the table under the name it names now; a retry
// recorded moves a PENDING row to RETRY.
type renamePrimary struct {
	names map[string]*physTable // by table name in schema shop
}

func (p *renamePrimary) set(t *outbox.Table, m rowstatus.Marks, status string) (int64, error) {
	pt := p.names[t.Name]
	if t.Schema != "shop" || pt == nil {
		return 0, &mysql.MySQLError{Number: 1146, Message: fmt.Sprintf("Table '%s' doesn't exist", t.FullName())}
	}
	var n int64
	for i, id := range m.IDs {
		r := pt.rows[id.(int)]
		if r == nil || r.status != "PENDING" || (m.Guarded(t) && r.msgID != m.MessageIDs[i]) {
			continue
		}
		r.status = status
		n++
	}
	return n, nil
}

func (p *renamePrimary) MarkSent(_ context.Context, t *outbox.Table, m rowstatus.Marks) (int64, error) {
	return p.set(t, m, "SENT")
}

func (p *renamePrimary) MarkRetryMany(_ context.Context, t *outbox.Table, _ rowstatus.Attempt, m rowstatus.Marks) (rowstatus.Outcome, int64, error) {
	n, err := p.set(t, m, "RETRY")
	return rowstatus.Retrying, n, err
}

// binlogEntry is one thing the reader reads: a row inserted under the
// configured name, or a rename statement.
type binlogEntry struct {
	id     int
	msgID  string
	fails  bool // its publish fails: a retry is recorded
	rename []tablerename.Pair
}

// renameWorld is one generated history and the relay reading it.
type renameWorld struct {
	t       *testing.T
	tb      *outbox.Table
	primary *renamePrimary
	log     []binlogEntry
	read    int // entries the reader has read
	// insertedAt is each message's insert entry in log.
	insertedAt map[string]int
	// home is the table each message was inserted into.
	home      map[string]*physTable
	published map[string]bool // message -> its publish failed
	// pending is the second statement of a two-step operation begun:
	// "_gho_N" to bring in, or "tmp_N" to bring back ("" when none).
	pending string
	n       int // names made so far
	msgs    int

	tracker *tablerename.Tracker
	c       *committer
	w       *recorder
	batches chan batch
}

const configured = "producer_message"

func newRenameWorld(t *testing.T) *renameWorld {
	tb := presetTable(t, "producer-message", "")
	r, _ := testRelay(t, tb, "")
	p := &renamePrimary{names: map[string]*physTable{configured: {rows: map[int]*fakeRow{}}}}
	r.marker = p
	batches := make(chan batch, 64)
	w := &renameWorld{t: t, tb: tb, primary: p, home: map[string]*physTable{}, insertedAt: map[string]int{}, published: map[string]bool{},
		tracker: tablerename.New([]tablerename.Name{{Schema: "shop", Table: configured}}), batches: batches,
		w: &recorder{r: r}}
	w.c = &committer{r: r, stop: context.Background(), pending: map[*outbox.Table]*rowstatus.Marks{}, batches: batches}
	return w
}

func (w *renameWorld) name(prefix string) string {
	w.n++
	return fmt.Sprintf("%s_%d", prefix, w.n)
}

// maxLag is how many renames the primary runs ahead of the reader at
// most here, and ahead of a published row not yet marked where it lives:
// the relay follows a table's last 16 generations (keptGenerations,
// internal/tablerename), and a reader further behind, or marks that land
// only after more renames than that, may leave the marks of older ones
// unwritten (docs/lifecycle.md). The second bound was found by the
// property itself (-rapid.seed=12095415325107269731): a row's table
// archived, then renamed on three times while the reader was a few
// renames behind each time, so its marks chased it through 18
// rotations and were let go ("m-1 is PENDING in archive_12_on_27_on_46,
// where it was inserted; want SENT"; the sweeper, not the marks, then
// settles such a row).
const maxLag = 12

// rename runs a statement on the primary and logs it; rt skips it while
// the reader is maxLag renames behind.
func (w *renameWorld) rename(pairs ...[2]string) {
	var ps []tablerename.Pair
	moving := map[string]*physTable{}
	for _, p := range pairs {
		// Pairs run in order: "a TO b, c TO a" is valid.
		pt := w.primary.names[p[0]]
		if pt == nil {
			pt = moving[p[0]]
		}
		delete(w.primary.names, p[0])
		w.primary.names[p[1]] = pt
		ps = append(ps, tablerename.Pair{From: tablerename.Name{Schema: "shop", Table: p[0]}, To: tablerename.Name{Schema: "shop", Table: p[1]}})
	}
	w.log = append(w.log, binlogEntry{rename: ps})
}

// behind tells whether the reader has maxLag renames yet to read.
func (w *renameWorld) behind() bool {
	if renamesIn(w.log[w.read:]) >= maxLag {
		return true
	}
	// A row published and not yet marked where it lives: its marks chase
	// its table through the renames read since; past the generations the
	// relay keeps, they are let go (docs/lifecycle.md).
	for msg, at := range w.insertedAt {
		if _, read := w.published[msg]; !read {
			continue
		}
		if st := statusOf(w.home[msg], msg); st == "PENDING" && renamesIn(w.log[at:]) >= maxLag {
			return true
		}
	}
	return false
}

// renamesIn counts the renames among entries.
func renamesIn(entries []binlogEntry) int {
	n := 0
	for _, e := range entries {
		if e.rename != nil {
			n++
		}
	}
	return n
}

// drain has the recorder write every batch the committer handed over.
func (w *renameWorld) drain() {
	for {
		select {
		case b := <-w.batches:
			if err := w.w.write(context.Background(), b); err != nil {
				w.t.Fatal(err)
			}
		default:
			return
		}
	}
}

// readOne has the reader read the next entry into the committer.
func (w *renameWorld) readOne(rt rapid.TB) {
	ctx := context.Background()
	e := w.log[w.read]
	w.read++
	if e.rename == nil {
		w.tracker.RowsRead(0)
		row := markedRow(w.tb, e.id, 0, "k")
		row.Values["message_id"] = e.msgID
		res := publisher.Result[Ticket]{Job: publisher.Job[Ticket]{Msg: &router.Message{Exchange: "orders"}}}
		if e.fails {
			res.Err = errors.New("nacked")
		}
		if err := w.c.row(ctx, &inflightRow{row: row}, res); err != nil {
			rt.Fatal(err)
		}
		w.published[e.msgID] = e.fails
	} else {
		for _, mv := range w.tracker.Renamed(e.rename) {
			rn := &binlog.Rename{Table: w.tb, Schema: mv.To.Schema, Name: mv.To.Table, Replaced: mv.Replaced,
				Generation: mv.Generation, Earlier: mv.Earlier}
			if err := (renameTicket{rn}).apply(ctx, w.c, publisher.Result[Ticket]{}); err != nil {
				rt.Fatal(err)
			}
			w.drain()
		}
	}
	w.drain()
}

// The primary's operations.

func (w *renameWorld) insert(n int, fails ...bool) {
	pt := w.primary.names[configured]
	for i := range n {
		pt.nextID++
		w.msgs++
		msg := fmt.Sprintf("m-%d", w.msgs)
		pt.rows[pt.nextID] = &fakeRow{msgID: msg, status: "PENDING"}
		w.home[msg] = pt
		w.insertedAt[msg] = len(w.log)
		w.log = append(w.log, binlogEntry{id: pt.nextID, msgID: msg, fails: i < len(fails) && fails[i]})
	}
}

func (w *renameWorld) oneStepCutOver() {
	gho := w.name("_gho")
	w.primary.names[gho] = w.primary.names[configured].clone()
	w.rename([2]string{configured, w.name("_del")}, [2]string{gho, configured})
}

func (w *renameWorld) twoStepCutOver() {
	gho := w.name("_gho")
	w.primary.names[gho] = w.primary.names[configured].clone()
	w.rename([2]string{configured, w.name("_del")})
	w.pending = gho
}

func (w *renameWorld) renameAway() {
	tmp := w.name("tmp")
	w.rename([2]string{configured, tmp})
	w.pending = tmp
}

func (w *renameWorld) secondStatement() {
	w.rename([2]string{w.pending, configured})
	w.pending = ""
}

func (w *renameWorld) archivalRotation() {
	fresh := w.name("new")
	w.primary.names[fresh] = &physTable{rows: map[int]*fakeRow{}}
	w.rename([2]string{configured, w.name("archive")}, [2]string{fresh, configured})
}

// The relay's.

func (w *renameWorld) readEntries(rt rapid.TB, n int) {
	for range n {
		w.readOne(rt)
	}
}

func (w *renameWorld) flush(rt rapid.TB) {
	if err := w.c.flush(context.Background(), false, false); err != nil {
		rt.Fatal(err)
	}
	w.drain()
}

// catchUp has the reader read everything and the last marks written, and
// checks the invariants.
func (w *renameWorld) catchUp(rt rapid.TB) {
	w.readEntries(rt, len(w.log)-w.read)
	w.flush(rt)
	w.noWrongMarks(rt)
	w.allMarked(rt)
}

// noWrongMarks: every SENT row carries a message that was published.
func (w *renameWorld) noWrongMarks(rt rapid.TB) {
	for name, pt := range w.primary.names {
		for id, r := range pt.rows {
			failed, read := w.published[r.msgID]
			if (r.status == "SENT" && (!read || failed)) || (r.status == "RETRY" && !failed) {
				rt.Fatalf("%s id %d (%s) is %s, but its publish was not read or did not end so", name, id, r.msgID, r.status)
			}
		}
	}
}

// allMarked: every published row is SENT where it was inserted (unless
// that table was dropped) and in the table under the configured name, if
// it holds the message.
func (w *renameWorld) allMarked(rt rapid.TB) {
	live := map[*physTable]string{}
	for name, pt := range w.primary.names {
		live[pt] = name
	}
	current := w.primary.names[configured]
	for _, msg := range slices.Sorted(maps.Keys(w.published)) {
		want := "SENT"
		if w.published[msg] {
			want = "RETRY" // a failure recorded: never PENDING without a reason
		}
		home := w.home[msg]
		if name, ok := live[home]; ok {
			if st := statusOf(home, msg); st != want {
				rt.Fatalf("%s is %s in %s, where it was inserted; want %s", msg, st, name, want)
			}
		}
		if current != nil {
			if st := statusOf(current, msg); st != "" && st != want {
				rt.Fatalf("%s is %s in the table now under the configured name; want %s", msg, st, want)
			}
		}
	}
}

func statusOf(pt *physTable, msg string) string {
	for _, r := range pt.rows {
		if r.msgID == msg {
			return r.status
		}
	}
	return ""
}

func TestRenamesPropertyMarksLandWhereTheRowsLive(t *testing.T) {
	// rapid runs -rapid.checks cases per Check (100 by default), of
	// -rapid.steps actions: twenty Checks make 2,000 histories in a
	// fraction of a second (-rapid.checks=30000 -rapid.steps=150 passes
	// in about 20 s).
	for range 20 {
		if t.Failed() {
			return
		}
		renameProperty(t)
	}
}

func renameProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newRenameWorld(t)
		exists := func() bool { return w.primary.names[configured] != nil }
		renames := func(rt *rapid.T) {
			if w.behind() {
				rt.Skip("the reader is maxLag renames behind")
			}
		}
		actions := map[string]func(*rapid.T){
			"insert": func(rt *rapid.T) {
				if !exists() {
					rt.Skip("no table under the configured name")
				}
				n := rapid.IntRange(1, 3).Draw(rt, "rows")
				w.insert(n, rapid.SliceOfN(rapid.Bool(), n, n).Draw(rt, "fails")...)
			},
			"one-step cut-over": func(rt *rapid.T) {
				renames(rt)
				if !exists() || w.pending != "" {
					rt.Skip("no table, or a two-step operation open")
				}
				w.oneStepCutOver()
			},
			"two-step cut-over, first statement": func(rt *rapid.T) {
				renames(rt)
				if !exists() || w.pending != "" {
					rt.Skip("no table, or a two-step operation open")
				}
				w.twoStepCutOver()
			},
			"renamed away": func(rt *rapid.T) {
				renames(rt)
				if !exists() || w.pending != "" {
					rt.Skip("no table, or a two-step operation open")
				}
				w.renameAway()
			},
			"second statement": func(rt *rapid.T) {
				// Only the reader's lag: the marks of a two-step
				// operation's rows land at its second statement.
				if renamesIn(w.log[w.read:]) >= maxLag {
					rt.Skip("the reader is maxLag renames behind")
				}
				if w.pending == "" {
					rt.Skip("no two-step operation open")
				}
				w.secondStatement()
			},
			"created after a rename away": func(rt *rapid.T) {
				if exists() || !strings.HasPrefix(w.pending, "tmp") {
					rt.Skip("the name is not empty after a rename away")
				}
				w.primary.names[configured] = &physTable{rows: map[int]*fakeRow{}}
				w.pending = ""
			},
			"archival rotation": func(rt *rapid.T) {
				renames(rt)
				if !exists() || w.pending != "" {
					rt.Skip("no table, or a two-step operation open")
				}
				w.archivalRotation()
			},
			"old table renamed on or dropped": func(rt *rapid.T) {
				renames(rt)
				var old []string
				for name := range w.primary.names {
					if name != configured && name != w.pending && !strings.HasPrefix(name, "_gho") && !strings.HasPrefix(name, "new") {
						old = append(old, name)
					}
				}
				if len(old) == 0 {
					rt.Skip("no old table")
				}
				name := rapid.SampledFrom(slices.Sorted(slices.Values(old))).Draw(rt, "old")
				if rapid.Bool().Draw(rt, "drop") {
					delete(w.primary.names, name) // DROP TABLE: not in the reader's way
					return
				}
				w.rename([2]string{name, w.name(name + "_on")})
			},
			"reader reads": func(rt *rapid.T) {
				if w.read == len(w.log) {
					rt.Skip("nothing to read")
				}
				w.readEntries(rt, rapid.IntRange(1, len(w.log)-w.read).Draw(rt, "entries"))
			},
			"marks written": func(rt *rapid.T) {
				w.flush(rt)
			},
			"": func(rt *rapid.T) { w.noWrongMarks(rt) },
		}
		rt.Repeat(actions)
		w.catchUp(rt)
	})
}

// Shrunk counterexamples the property found, kept as examples.

// A one-step cut-over read after the table under the configured name (the
// copy holding the rows) went away in a two-step cut-over's first
// statement: the copy of the copy, renamed in by the second statement,
// holds the rows too, and is marked at it (it stayed PENDING when only the
// generation's own marks moved).
func TestRenameCopyOfACopyIsMarked(t *testing.T) {
	w := newRenameWorld(t)
	w.insert(1)
	w.oneStepCutOver()
	w.readEntries(t, 1)
	w.twoStepCutOver()
	w.readEntries(t, 1)
	w.secondStatement()
	w.catchUp(t)
}

// A table renamed away and back before the reader reads either statement:
// the marks written where the first one took the rows find no table, and
// are written under the configured name at the second.
func TestRenameAwayAndBackBeforeTheReaderSeesIt(t *testing.T) {
	w := newRenameWorld(t)
	w.insert(3)
	w.readEntries(t, 3)
	w.renameAway()
	w.secondStatement()
	w.catchUp(t)
}

// A failure recorded by name after the primary ran an archival rotation,
// before the reader read it: written again in the archive at the rename.
func TestRenameFailureInTheWindowOfARotation(t *testing.T) {
	w := newRenameWorld(t)
	w.insert(2, false, true)
	w.readEntries(t, 2)
	w.archivalRotation()
	w.insert(2)
	w.flush(t)
	w.catchUp(t)
}

package binlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// script feeds a stream synthetic events, as a binlog connection would,
// and collects what it emits.
type script struct {
	t   *testing.T
	s   *stream
	out chan Event
	pos uint32
	tme *replication.TableMapEvent
}

func newScript(t *testing.T, cfg Config) *script {
	t.Helper()
	return newScriptOf(t, cfg, seedTable(t), tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated))
}

func newScriptOf(t *testing.T, cfg Config, tb *outbox.Table, tme *replication.TableMapEvent) *script {
	t.Helper()
	cfg.Host, cfg.Port, cfg.User = "x", 1, "u"
	if cfg.Flavor == "" {
		cfg.Flavor = FlavorMariaDB
	}
	r, err := New(cfg, []*outbox.Table{tb})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTracker(Position{Flavor: cfg.Flavor, File: "binlog.000001", Pos: 4})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan Event, 100_000)
	return &script{t: t, s: &stream{r: r, out: out, tracker: tr, cancel: func() {}, renames: r.newRenameTracker()}, out: out, pos: 4, tme: tme}
}

func (sc *script) feed(typ replication.EventType, e replication.Event) error {
	sc.pos += 100
	return sc.s.handleSafely(context.Background(), &replication.BinlogEvent{
		Header: &replication.EventHeader{EventType: typ, LogPos: sc.pos, Timestamp: 1_700_000_000}, Event: e})
}

func (sc *script) must(typ replication.EventType, e replication.Event) {
	sc.t.Helper()
	if err := sc.feed(typ, e); err != nil {
		sc.t.Fatalf("%s: %v", typ, err)
	}
}

func (sc *script) gtid(seq uint64) {
	sc.must(replication.MARIADB_GTID_EVENT, &replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: seq}})
}

func (sc *script) query(q string) {
	sc.must(replication.QUERY_EVENT, &replication.QueryEvent{Query: []byte(q)})
}
func (sc *script) xid() { sc.must(replication.XID_EVENT, &replication.XIDEvent{}) }

// insert logs one WRITE_ROWS event with a row per id; status decides
// whether the row is publishable.
func (sc *script) insert(status string, ids ...int) {
	sc.t.Helper()
	if err := sc.feed(replication.WRITE_ROWS_EVENTv2, sc.rows(status, ids...)); err != nil {
		sc.t.Fatalf("rows: %v", err)
	}
}

func (sc *script) rows(status string, ids ...int) *replication.RowsEvent {
	e := &replication.RowsEvent{Table: sc.tme, ColumnBitmap1: []byte{0xff}}
	for _, id := range ids {
		e.Rows = append(e.Rows, []any{int64(id), fmt.Sprintf("m-%d", id), "ex", "rk", []byte("{}"), status, time.Unix(1_700_000_000, 0).UTC()})
	}
	return e
}

// drain returns the ids of the rows emitted, and the commits, in order
// ("c" for a commit).
func (sc *script) drain() []string {
	var got []string
	for {
		select {
		case ev := <-sc.out:
			switch {
			case ev.Kind == KindCommit && ev.Commit.OpenXA:
				got = append(got, "cx") // not a position to resume from
			case ev.Kind == KindCommit:
				got = append(got, "c")
			default:
				got = append(got, fmt.Sprint(ev.Row.ID))
			}
		default:
			return got
		}
	}
}

func expect(t *testing.T, got []string, want string) {
	t.Helper()
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("emitted %q, want %q", g, want)
	}
}

// Three cuts inside one transaction, one of them before the transaction was
// read again: every row goes out once, in order.
func TestResumeSkipSurvivesRepeatedReconnects(t *testing.T) {
	for _, withGTID := range []bool{true, false} {
		t.Run(fmt.Sprintf("gtid=%v", withGTID), func(t *testing.T) {
			sc := newScript(t, Config{})
			begin := func() {
				if withGTID {
					sc.gtid(7)
				}
				sc.query("BEGIN")
			}
			begin()
			sc.insert("PENDING", 1, 2, 3)
			sc.s.resume() // cut 1 after 3 rows
			begin()
			sc.insert("PENDING", 1, 2)
			sc.s.resume() // cut 2 before reaching what cut 1 had sent
			sc.s.resume() // cut 3 before the transaction was read again
			begin()
			sc.insert("PENDING", 1, 2, 3, 4)
			sc.insert("SENT", 5) // not publishable, still counted
			sc.s.resume()        // cut 4 after rows the earlier cuts had not reached
			begin()
			sc.insert("PENDING", 1, 2, 3, 4)
			sc.insert("SENT", 5)
			sc.insert("PENDING", 6)
			sc.xid()
			// The next transaction is not skipped.
			begin()
			sc.insert("PENDING", 1)
			sc.xid()
			expect(t, sc.drain(), "1 2 3 4 6 c 1 c")
		})
	}
}

func TestXACommitDeliversAndRollbackDrops(t *testing.T) {
	sc := newScript(t, Config{})
	prepare := func(seq uint64, xid string, ids ...int) {
		sc.gtid(seq)
		sc.query("XA START " + xid)
		sc.insert("PENDING", ids...)
		sc.query("XA END " + xid)
		sc.must(replication.XA_PREPARE_LOG_EVENT, &replication.GenericEvent{Data: []byte{0, 1, 0, 0, 0}})
	}
	prepare(1, "X'31',X'',1", 1, 2)
	prepare(2, "X'32',X'',1", 3)
	expect(t, sc.drain(), "cx cx") // prepares move the position, nothing published, no checkpoint past them
	if sc.s.heldRows != 3 {
		t.Fatalf("held %d rows, want 3", sc.s.heldRows)
	}
	sc.gtid(3)
	sc.query("XA ROLLBACK X'32',X'',1")
	sc.gtid(4)
	sc.query("XA COMMIT X'31',X'',1")
	// A plain transaction in between is not held.
	sc.gtid(5)
	sc.query("BEGIN")
	sc.insert("PENDING", 9)
	sc.xid()
	expect(t, sc.drain(), "cx 1 2 c 9 c")
	if sc.s.heldRows != 0 || sc.s.heldBytes != 0 || len(sc.s.prepared) != 0 {
		t.Fatalf("still held: %d rows, %d bytes, %d branches", sc.s.heldRows, sc.s.heldBytes, len(sc.s.prepared))
	}
	if got := sc.s.tracker.Position().GTIDSet; got != "0-1-5" {
		t.Fatalf("position %s", got)
	}

	// One phase: XA COMMIT ... ONE PHASE after XA END, no prepare.
	sc.gtid(6)
	sc.query("XA START X'33',X'',1")
	sc.insert("PENDING", 10)
	sc.query("XA END X'33',X'',1")
	sc.query("XA COMMIT X'33',X'',1 ONE PHASE")
	expect(t, sc.drain(), "10 c")
}

// A cut while an XA COMMIT was emitting its rows: they are not sent twice.
func TestXACommitResumedAfterACut(t *testing.T) {
	sc := newScript(t, Config{})
	sc.gtid(1)
	sc.query("XA START X'31',X'',1")
	sc.insert("PENDING", 1, 2, 3)
	sc.query("XA END X'31',X'',1")
	sc.must(replication.XA_PREPARE_LOG_EVENT, &replication.GenericEvent{Data: []byte{0}})
	// Emit two rows of the XA COMMIT, then the connection drops.
	sc.gtid(2)
	sc.s.xa = nil
	b := sc.s.prepared["x'31',x'',1"]
	for _, row := range b.held.rows[:2] {
		if err := sc.s.emitRow(context.Background(), row); err != nil {
			t.Fatal(err)
		}
	}
	sc.s.resume()
	sc.gtid(2)
	sc.query("XA COMMIT X'31',X'',1")
	expect(t, sc.drain(), "cx 1 2 3 c")
}

func TestXABufferBound(t *testing.T) {
	sc := newScript(t, Config{XABufferRows: 3})
	sc.gtid(1)
	sc.query("XA START X'31',X'',1")
	sc.insert("PENDING", 1, 2, 3)
	err := sc.feed(replication.WRITE_ROWS_EVENTv2, sc.rows("PENDING", 4))
	var fatal *fatalError
	if !errors.As(err, &fatal) || !errors.Is(err, ErrXABufferFull) || !strings.Contains(err.Error(), "x'31',x'',1") || !strings.Contains(err.Error(), "Config.XABufferRows") {
		t.Fatalf("past the bound: %v; want a fatal error naming the xid and the setting", err)
	}
	expect(t, sc.drain(), "")
}

func TestParseXA(t *testing.T) {
	for q, want := range map[string]xaStmt{
		"XA START X'31',X'',1":                {verb: "START", xid: "x'31',x'',1"},
		"xa begin 'a', 'b'":                   {verb: "START", xid: "'a','b'"},
		"XA END X'31',X'',1 SUSPEND":          {verb: "END", xid: "x'31',x'',1"},
		"XA PREPARE X'31',X'',1":              {verb: "PREPARE", xid: "x'31',x'',1"},
		"XA COMMIT X'31',X'',1 ONE PHASE":     {verb: "COMMIT", xid: "x'31',x'',1", onePhase: true},
		"XA ROLLBACK X'31',X'',1":             {verb: "ROLLBACK", xid: "x'31',x'',1"},
		"XA START X'31',X'',1 JOIN":           {verb: "START", xid: "x'31',x'',1"},
		"XA COMMIT X'6f6e65',X'7068617365',1": {verb: "COMMIT", xid: "x'6f6e65',x'7068617365',1"},
	} {
		got, ok := parseXA(q)
		if !ok || got != want {
			t.Errorf("parseXA(%q) = %+v, %v; want %+v", q, got, ok, want)
		}
	}
	for _, q := range []string{"BEGIN", "XA RECOVER", "INSERT INTO xa VALUES (1)", "XA"} {
		if _, ok := parseXA(q); ok {
			t.Errorf("parseXA(%q) recognised", q)
		}
	}
}

// Error 1236 carries many conditions; only a purged position is purged.
func TestClassifyError1236(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want replErrKind
	}{
		{"Could not find first log file name in binary log index file", replErrPurged},
		{"The slave is connecting using CHANGE MASTER TO MASTER_AUTO_POSITION = 1, but the master has purged binary logs containing GTIDs that the slave requires.", replErrPurged},
		{"Cannot replicate because the master purged required binary logs. Replicate the missing transactions from elsewhere, or provision a new slave from backup.", replErrPurged},
		{"Cannot replicate because the source purged required binary logs. Replicate the missing transactions from elsewhere, or provision a new replica from backup. Consider increasing the source's binary log expiration period. The GTID set sent by the replica is '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5', and the missing transactions are '3e11fa47-71ca-11e1-9e33-c80aa9429562:6'", replErrPurged},
		{"Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.", replErrPurged},
		{"A slave with the same server_uuid/server_id as this slave has connected to the master; the first event 'binlog.000002' at 4, the last event read from './binlog.000002' at 126, the last byte read from './binlog.000002' at 126.", replErrServerID},
		{"A replica with the same server_uuid/server_id as this replica has connected to the source; the first event 'binlog.000017' at 4", replErrServerID},
		// MariaDB 11.8 (seen on the test stack; its code is 4052 too)
		{"A slave with the same server_id is already connected; the first event '.' at 0, the last event read from 'binlog.000010' at 18277, the last byte read from 'binlog.000010' at 18308.", replErrServerID},
		// Not purged: reported as themselves.
		{"An attempt was made to binlog GTID 0-1-5 which would create an out-of-order sequence number with existing GTID 0-1-6, and gtid strict mode is enabled", replErrOther},
		{"Error: connecting slave requested to start from GTID 0-9-100, which is not in the master's binlog", replErrOther},
		{"The binlog on the master is missing the GTID 0-1-7 requested by the slave (even though a subsequent sequence number does exist), and GTID strict mode is enabled", replErrOther},
		{"log event entry exceeded max_allowed_packet; Increase max_allowed_packet on master; the first event 'binlog.000001' at 4", replErrOther},
		{"binlog truncated in the middle of event; consider out of disk space on master; the first event 'binlog.000001' at 4", replErrOther},
		{"bogus data in log event; the first event 'binlog.000001' at 4", replErrOther},
		{"Client requested master to start replication from position > file size", replErrOther},
	} {
		got, my := classifyReplError(fmt.Errorf("starting binlog stream: %w", &mysql.MyError{Code: mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, Message: c.msg}))
		if got != c.want || my == nil {
			t.Errorf("%q classified %d, want %d", c.msg, got, c.want)
		}
	}
	// MariaDB 10.11 drops the older of two connections with the same
	// server_id with its own code (as seen on the test stack).
	mariadb := &mysql.MyError{Code: 4052, Message: "A slave with the same server_uuid/server_id is already connected; the first event 'binlog.000019' at 4, the last event read from 'binlog.000019' at 28884456, the last byte read from 'binlog.000019' at 28884580."}
	if k, _ := classifyReplError(mariadb); k != replErrServerID {
		t.Errorf("MariaDB's duplicate server_id classified %d", k)
	}
	// Other codes and plain errors are never classified.
	if k, _ := classifyReplError(&mysql.MyError{Code: 1045, Message: "purged required binary logs"}); k != replErrOther {
		t.Errorf("error 1045 classified %d", k)
	}
	if k, _ := classifyReplError(errors.New("Could not find first log file name in binary log index file")); k != replErrOther {
		t.Errorf("a plain error classified %d", k)
	}
}

// A rows event decoded short (a corrupt or truncated event): the panic
// indexing its values becomes an error naming the binlog position, and
// go-mysql's own recovered parser panic gets the position too.
func TestCorruptEventIsAnErrorNamingThePosition(t *testing.T) {
	sc := newScript(t, Config{})
	sc.gtid(1)
	sc.query("BEGIN")
	short := sc.rows("PENDING", 1)
	short.Rows[0] = short.Rows[0][:2]
	err := sc.feed(replication.WRITE_ROWS_EVENTv2, short)
	if err == nil || !strings.Contains(err.Error(), "binlog.000001:") || !strings.Contains(err.Error(), fmt.Sprint(sc.pos)) {
		t.Fatalf("short rows: %v; want an error naming binlog.000001:%d", err, sc.pos)
	}
	parserPanic := errors.New("panic runtime error: slice bounds out of range [:4] with capacity 2\nstack: goroutine 7 [running]:\n...")
	got := streamError(parserPanic, "binlog.000003", 9876)
	if !strings.Contains(got.Error(), "binlog.000003:9876") || strings.Contains(got.Error(), "goroutine") {
		t.Fatalf("parser panic: %v", got)
	}
	plain := &mysql.MyError{Code: 1236, Message: "bogus data in log event"}
	if got := streamError(plain, "f", 1); !strings.Contains(got.Error(), "f:1") || !errors.Is(got, plain) {
		t.Fatalf("a stream error: %v; want the position added and the error kept", got)
	}
	if got := streamError(context.Canceled, "f", 1); got != context.Canceled {
		t.Fatalf("cancellation rewritten: %v", got)
	}
}

// Without column names in the binlog, a row whose TABLE_MAP disagrees with
// the schema read from the source stops the reader with an error naming the
// table, the position and the fix; nothing is emitted.
func TestMismatchedTableMapNamesTablePositionAndFix(t *testing.T) {
	tb := seedTable(t)
	fake := &fakeSchema{}
	fake.set(schemaOf(cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated, cTenant)) // after ALTER ADD COLUMN
	r, err := New(Config{Host: "x", Port: 1, User: "u", Flavor: FlavorMariaDB}, []*outbox.Table{tb}, WithSchemaSource(fake))
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := NewTracker(Position{Flavor: FlavorMariaDB, GTIDSet: "0-1-1", File: "binlog.000004", Pos: 4})
	out := make(chan Event, 10)
	s := &stream{r: r, out: out, tracker: tr, cancel: func() {}, renames: r.newRenameTracker()}
	sc := &script{t: t, s: s, out: out, pos: 1000, tme: tableMap(false, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated)}
	sc.gtid(2)
	sc.query("BEGIN")
	err = sc.feed(replication.WRITE_ROWS_EVENTv2, sc.rows("PENDING", 1))
	for _, want := range []string{"app.producer_message", "binlog.000004:1300", "0-1-2", "binlog_row_metadata=FULL", "7 columns", "8"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v; want it to name %q", err, want)
		}
	}
	expect(t, sc.drain(), "")

	// Same column count, an incompatible type in place: refused too.
	fake.set(schemaOf(cID, cMsgID, cEx, cRK, cBody, cTenant, cCreated))
	fake.Forget("app", "producer_message")
	err = sc.feed(replication.WRITE_ROWS_EVENTv2, sc.rows("PENDING", 1))
	if err == nil || !strings.Contains(err.Error(), "column 6") || !strings.Contains(err.Error(), "binlog_row_metadata=FULL") {
		t.Fatalf("type mismatch: %v", err)
	}
	expect(t, sc.drain(), "")
}

// MariaDB logs XA START inside the GTID event (flag FL_PREPARED_XA), as
// SHOW BINLOG EVENTS on MariaDB 10.11 shows:
//
//	Gtid        XA START X'7031',X'',1 GTID 0-1-66745
//	Table_map, Write_rows_v1
//	Query       XA END X'7031',X'',1
//	XA_prepare  XA PREPARE X'7031',X'',1
//	Gtid        GTID 0-1-66746
//	Query       XA COMMIT X'7031',X'',1
func TestXAMariaDBBranchInTheGTIDEvent(t *testing.T) {
	sc := newScript(t, Config{})
	branch := func(seq uint64, gtrid string, ids ...int) {
		sc.must(replication.MARIADB_GTID_EVENT, &replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{ServerID: 1, SequenceNumber: seq}, Flags: mariadbFlPreparedXA})
		sc.insert("PENDING", ids...)
		sc.query(fmt.Sprintf("XA END X'%x',X'',1", gtrid))
		body := []byte{0, 1, 0, 0, 0, byte(len(gtrid)), 0, 0, 0, 0, 0, 0, 0}
		sc.must(replication.XA_PREPARE_LOG_EVENT, &replication.GenericEvent{Data: append(body, gtrid...)})
	}
	branch(1, "p1", 1, 2)
	branch(2, "p2", 3)
	sc.gtid(3)
	sc.query("XA COMMIT X'7031',X'',1")
	sc.gtid(4)
	sc.query("XA ROLLBACK X'7032',X'',1")
	expect(t, sc.drain(), "cx cx 1 2 cx c") // cx: p2 is still prepared
	if s := xidOfPrepare([]byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 'p', '1', 'b'}); s != "x'7031',x'62',1" {
		t.Fatalf("xid of a prepare event: %s", s)
	}
}

// The events a server sends at the start of a stream carry the time their
// binlog file was created: a relay starting on an hour-old file is not an
// hour behind. The first change event sets the lag, and an idle heartbeat
// brings it back to zero.
func TestLagIgnoresTheFileStartEvents(t *testing.T) {
	sc := newScript(t, Config{Heartbeat: time.Minute})
	hourAgo := uint32(time.Now().Add(-time.Hour).Unix())
	for _, e := range []struct {
		typ replication.EventType
		ev  replication.Event
	}{
		{replication.ROTATE_EVENT, &replication.RotateEvent{Position: 4, NextLogName: []byte("binlog.000002")}},
		{replication.FORMAT_DESCRIPTION_EVENT, &replication.FormatDescriptionEvent{}},
		{replication.MARIADB_GTID_LIST_EVENT, &replication.MariadbGTIDListEvent{}},
		{replication.MARIADB_BINLOG_CHECKPOINT_EVENT, &replication.MariadbBinlogCheckPointEvent{}},
	} {
		if err := sc.s.handleSafely(context.Background(), &replication.BinlogEvent{
			Header: &replication.EventHeader{EventType: e.typ, Timestamp: hourAgo}, Event: e.ev}); err != nil {
			t.Fatalf("%s: %v", e.typ, err)
		}
	}
	if lag := sc.s.r.Lag(time.Now()); lag > time.Second {
		t.Fatalf("lag after the file-start events = %s, want 0 (they carry the file's creation time)", lag)
	}
	sc.gtid(1) // dated 2023: a change event does set the lag
	if lag := sc.s.r.Lag(time.Now()); lag < 24*time.Hour {
		t.Fatalf("lag after a change event from 2023 = %s, want over a day", lag)
	}
	sc.query("COMMIT")
	sc.must(replication.HEARTBEAT_EVENT, &replication.HeartbeatEvent{})
	if lag := sc.s.r.Lag(time.Now()); lag > time.Second {
		t.Fatalf("lag after an idle heartbeat = %s, want 0", lag)
	}
}

// stopLikeRun does what Run's stop watcher does when the caller's context
// ends, and reports whether it cancelled the stream at once.
func (sc *script) stopLikeRun() bool {
	sc.s.stopping.Store(true)
	return sc.s.phase.CompareAndSwap(phaseIdle, phaseStopped)
}

// A stop between transactions stops the stream at once, and a transaction
// whose first event comes after it is not begun: none of its rows is sent
// without its commit. A stop inside a transaction lets it finish: every row
// and then the commit, after which the stream stops.
func TestStopLandsOnATransactionBoundary(t *testing.T) {
	sc := newScript(t, Config{})
	sc.gtid(1)
	sc.insert("PENDING", 1, 2)
	sc.xid()
	if !sc.stopLikeRun() {
		t.Fatal("a stop between transactions did not stop the stream at once")
	}
	err := sc.feed(replication.MARIADB_GTID_EVENT, &replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 2}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a transaction began after the stop: %v", err)
	}
	expect(t, sc.drain(), "1 2 c")

	sc = newScript(t, Config{})
	cancelled := false
	sc.s.cancel = func() { cancelled = true }
	sc.gtid(1)
	sc.insert("PENDING", 1, 2)
	if sc.stopLikeRun() {
		t.Fatal("a stop inside a transaction cancelled the stream before its commit")
	}
	sc.insert("PENDING", 3)
	if err := sc.feed(replication.XID_EVENT, &replication.XIDEvent{}); !errors.Is(err, context.Canceled) || !cancelled {
		t.Fatalf("the commit after a stop: %v (cancelled %v), want the stream stopped", err, cancelled)
	}
	expect(t, sc.drain(), "1 2 3 c")
}

// update logs one UPDATE_ROWS event: each id's row goes from the status
// before to the status and body after.
func (sc *script) update(before, after, body string, ids ...int) {
	sc.t.Helper()
	e := &replication.RowsEvent{Table: sc.tme, ColumnBitmap1: []byte{0xff}, ColumnBitmap2: []byte{0xff}}
	for _, id := range ids {
		e.Rows = append(e.Rows, sc.values(id, before, "{}"), sc.values(id, after, body))
	}
	if err := sc.feed(replication.UPDATE_ROWS_EVENTv2, e); err != nil {
		sc.t.Fatalf("update: %v", err)
	}
}

func (sc *script) delete(ids ...int) {
	sc.t.Helper()
	e := &replication.RowsEvent{Table: sc.tme, ColumnBitmap1: []byte{0xff}}
	for _, id := range ids {
		e.Rows = append(e.Rows, sc.values(id, "PENDING", "{}"))
	}
	if err := sc.feed(replication.DELETE_ROWS_EVENTv2, e); err != nil {
		sc.t.Fatalf("delete: %v", err)
	}
}

func (sc *script) values(id int, status, body string) []any {
	return []any{int64(id), fmt.Sprintf("m-%d", id), "ex", "rk", []byte(body), status, time.Unix(1_700_000_000, 0).UTC()}
}

// drainRows returns the rows emitted (commits dropped).
func (sc *script) drainRows() []*outbox.Row {
	var rows []*outbox.Row
	for {
		select {
		case ev := <-sc.out:
			if ev.Kind == KindRow {
				rows = append(rows, ev.Row)
			}
		default:
			return rows
		}
	}
}

func bodies(rows []*outbox.Row) string {
	var out []string
	for _, r := range rows {
		s := fmt.Sprintf("%v:%s", r.ID, r.Values["content"])
		if r.Deleted {
			s += ":deleted"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// A row updated in the transaction that inserted it is published once, as
// committed; one updated to a status that is not publishable is not
// published; one deleted is published as last written and flagged.
func TestTransactionPublishesRowsAsCommitted(t *testing.T) {
	sc := newScript(t, Config{})
	sc.gtid(1)
	sc.query("BEGIN")
	sc.insert("PENDING", 1, 2, 3, 4)
	sc.update("PENDING", "PENDING", `{"v":2}`, 1)
	sc.update("PENDING", "PENDING", `{"v":3}`, 1)
	sc.update("PENDING", "CANCELLED", `{}`, 2)
	sc.update("PENDING", "PENDING", `{"v":2}`, 4)
	sc.delete(4)
	sc.xid()
	if got := bodies(sc.drainRows()); got != `1:{"v":3} 3:{} 4:{"v":2}:deleted` {
		t.Fatalf("published %s", got)
	}
}

// UPDATEs of rows written before the transaction: back to a publishable
// status is a re-queue (published); the relay's own SENT marks and edits of
// rows still pending are not.
func TestRequeueInTheBinlogIsPublished(t *testing.T) {
	sc := newScript(t, Config{})
	sc.gtid(1)
	sc.query("BEGIN")
	sc.update("PENDING", "SENT", "{}", 1)             // a mark
	sc.update("PENDING", "PENDING", `{"edit":1}`, 2)  // an edit of a pending row
	sc.update("SENT", "PENDING", `{"again":1}`, 3)    // a re-queue
	sc.update("FAILED", "SENDING", `{"again":2}`, 4)  // publishable too
	sc.update("PENDING", "PENDING", `{"again":3}`, 3) // then edited in the same transaction
	sc.xid()
	if got := bodies(sc.drainRows()); got != `3:{"again":3} 4:{"again":2}` {
		t.Fatalf("published %s", got)
	}
}

// Past TxBufferRows the rows held are sent before the commit; a later
// UPDATE of one of them sends its committed version too, and a reconnect
// inside the transaction sends nothing twice.
func TestLargeTransactionSendsEarlyAndResendsUpdatedRows(t *testing.T) {
	sc := newScript(t, Config{TxBufferRows: 2})
	begin := func() { sc.gtid(7); sc.query("BEGIN") }
	begin()
	sc.insert("PENDING", 1, 2, 3)
	if got := bodies(sc.drainRows()); got != "1:{} 2:{}" {
		t.Fatalf("sent early: %s", got)
	}
	sc.s.resume() // cut after the first two were sent
	begin()
	sc.insert("PENDING", 1, 2, 3, 4)
	sc.update("PENDING", "PENDING", `{"v":2}`, 1)
	sc.xid()
	if got := bodies(sc.drainRows()); got != `3:{} 4:{} 1:{"v":2}` {
		t.Fatalf("after the reconnect: %s", got)
	}
}

// The resend of rows a large transaction sent early and then updated is
// logged once, at the commit, with the transaction's GTID, the commit's
// position and how many rows were sent again; never with their payloads.
func TestLargeTransactionResendIsLoggedOnceWithoutPayloads(t *testing.T) {
	sc := newScript(t, Config{TxBufferRows: 2})
	var logs bytes.Buffer
	sc.s.r.log = slog.New(slog.NewJSONHandler(&logs, nil))
	sc.gtid(7)
	sc.query("BEGIN")
	sc.insert("PENDING", 1, 2, 3, 4, 5)
	sc.update("PENDING", "PENDING", `{"card":"4111-secret-1"}`, 1)
	sc.update("PENDING", "PENDING", `{"card":"4111-secret-2"}`, 2)
	sc.xid()
	commitPos := sc.pos
	if got := bodies(sc.drainRows()); got != `1:{} 2:{} 3:{} 4:{} 5:{} 1:{"card":"4111-secret-1"} 2:{"card":"4111-secret-2"}` {
		t.Fatalf("published %s; want the five rows, then the committed versions of 1 and 2", got)
	}
	var warned []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, "rows updated in their own transaction after the reader had sent them") {
			warned = append(warned, rec)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("%d resend warnings, want 1; log:\n%s", len(warned), logs.String())
	}
	w := warned[0]
	if w["level"] != "WARN" || w["gtid"] != "0-1-7" || w["binlog_file"] != "binlog.000001" || w["binlog_pos"] != float64(commitPos) || w["rows"] != float64(2) {
		t.Fatalf("resend warning %v; want WARN, gtid 0-1-7, binlog.000001:%d, rows 2", w, commitPos)
	}
	if strings.Contains(logs.String(), "secret") || strings.Contains(logs.String(), "card") {
		t.Fatalf("the log holds payload data:\n%s", logs.String())
	}
}

// A re-queue whose next_retry_time is still ahead at its commit waits for
// the sweeper; one due (or without a time) is published.
func TestRequeueWaitsForItsRetryTime(t *testing.T) {
	tb := seedTable(t)
	tb.Columns.NextRetryTime = "create_time" // the synthetic table's DATETIME column
	sc := newScriptOf(t, Config{}, tb, tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated))
	commit := time.Unix(1_700_000_000, 0).UTC() // the events' timestamp
	row := func(id int, status string, retry any) []any {
		return []any{int64(id), fmt.Sprintf("m-%d", id), "ex", "rk", []byte("{}"), status, retry}
	}
	e := &replication.RowsEvent{Table: sc.tme, ColumnBitmap1: []byte{0xff}, ColumnBitmap2: []byte{0xff}, Rows: [][]any{
		row(1, "FAILED", nil), row(1, "PENDING", commit.Add(time.Minute)), // ahead: the sweeper's
		row(2, "FAILED", nil), row(2, "PENDING", commit.Add(-time.Second)), // due
		row(3, "FAILED", nil), row(3, "PENDING", nil), // no time: due
	}}
	sc.gtid(1)
	sc.query("BEGIN")
	sc.must(replication.UPDATE_ROWS_EVENTv2, e)
	sc.xid()
	if got := bodies(sc.drainRows()); got != "2:{} 3:{}" {
		t.Fatalf("published %s", got)
	}
}

// A REPLACE logged as a DELETE and an INSERT whose next_retry_time is ahead
// at its commit and later than its own create_time waits for the sweeper.
// One whose next_retry_time is NULL, not later than its create_time (both
// written from a clock ahead of the primary's), or already due, or that has
// no create_time, is published; so is every new row.
func TestInsertWithARetryTimeAheadWaitsForIt(t *testing.T) {
	tb := seedTable(t)
	tb.Columns.NextRetryTime = "next_retry_time"
	cRetry := col{"next_retry_time", "datetime", mysql.MYSQL_TYPE_DATETIME2, 3}
	sc := newScriptOf(t, Config{}, tb, tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated, cRetry))
	commit := time.Unix(1_700_000_000, 0).UTC() // the events' timestamp
	row := func(id int, status string, created, retry any) []any {
		return []any{int64(id), fmt.Sprintf("m-%d", id), "ex", "rk", []byte("{}"), status, created, retry}
	}
	rows := func(status string) [][]any {
		return [][]any{
			row(1, status, commit, commit.Add(time.Minute)),                    // re-queued for later: the sweeper's
			row(2, status, commit, nil),                                        // no retry time: due
			row(3, status, commit.Add(time.Minute), commit.Add(time.Minute)),   // a fast clock wrote both: due
			row(4, status, commit.Add(-time.Hour), commit.Add(-time.Minute)),   // scheduled, and due by now
			row(5, status, nil, commit.Add(time.Minute)),                       // no create_time to compare: due
			row(6, status, commit, commit.Add(500*time.Millisecond)),           // within the rounding: due
			row(7, status, commit.Add(-time.Hour), commit.Add(10*time.Second)), // a REPLACE keeping create_time, for later
		}
	}
	// New rows are published at once, whatever their next_retry_time: an
	// application with a retry job of its own sets it to "now plus a
	// delay" at the insert.
	sc.gtid(1)
	sc.query("BEGIN")
	sc.must(replication.WRITE_ROWS_EVENTv2, &replication.RowsEvent{Table: sc.tme, ColumnBitmap1: []byte{0xff}, Rows: rows("PENDING")})
	sc.xid()
	expect(t, sc.drain(), "1 2 3 4 5 6 7 c")
	// A REPLACE logged as a DELETE of the SENT rows and an INSERT: a
	// re-queue, which waits for a retry time scheduled after create_time.
	sc.gtid(2)
	sc.query("BEGIN")
	sc.must(replication.DELETE_ROWS_EVENTv2, &replication.RowsEvent{Table: sc.tme, ColumnBitmap1: []byte{0xff}, Rows: rows("SENT")})
	sc.must(replication.WRITE_ROWS_EVENTv2, &replication.RowsEvent{Table: sc.tme, ColumnBitmap1: []byte{0xff}, Rows: rows("PENDING")})
	sc.xid()
	expect(t, sc.drain(), "2 3 4 5 6 c")
}

package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// Online schema changes swap a copy of the outbox table in under its name
// while the application writes: gh-ost (RENAME TABLE t TO _t_del, _t_gho TO
// t) and pt-online-schema-change (RENAME TABLE t TO _t_old, _t_new TO t).
// The new t holds the same rows (same id, same message id) as the old one,
// so a mark the relay writes after the cut-over must reach the copy, or
// the sweeper sends the row again once its grace period is over.

// streamWriter inserts outbox rows, 10 per transaction, until stopped,
// never more than 200 ahead of the deliveries: on a busy machine a relay
// far behind would leave rows to the sweeper for reasons of its own. A
// cut-over holds hold to stop it between transactions (gh-ost's lock on the
// table).
type streamWriter struct {
	hold sync.Mutex
	mu   sync.Mutex
	ids  []string
	bg   *relaytest.Background
	got  *testenv.Collector // what the relay delivered (the writer keeps at most 200 rows ahead)
}

func startStreamWriter(t *testing.T, db *testenv.DB, got *testenv.Collector, exchange, prefix string) *streamWriter {
	t.Helper()
	w := &streamWriter{got: got}
	w.bg = relaytest.Go("writer", 30*time.Second, func(ctx context.Context) error {
		for i := 0; ctx.Err() == nil; i++ {
			for w.written()-w.got.Len() > 200 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(5 * time.Millisecond):
				}
			}
			stmt, ids := orderInsert(exchange, prefix, i, 10)
			w.hold.Lock()
			// Not ExecContext: a statement cut by the stop may have committed.
			// A deadlock with the tool's copy rolls the insert back; the
			// application writes it again, as applications do. The ids are
			// counted before hold is let go, so a cut-over that takes it next
			// counts every row committed before it.
			err := execRetrying(db, stmt)
			if err == nil {
				w.mu.Lock()
				w.ids = append(w.ids, ids...)
				w.mu.Unlock()
			}
			w.hold.Unlock()
			if err != nil {
				return err
			}
		}
		return nil
	})
	t.Cleanup(func() { _ = w.bg.Stop() })
	return w
}

func (w *streamWriter) written() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ids)
}

// stop stops the writer once it wrote more rows after the cut-over, and
// returns the message ids of every row it wrote, in commit order.
func (w *streamWriter) stop(t *testing.T, atCutOver int) []string {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "rows written after the cut-over", func() (bool, string) {
		if exited, err := w.bg.Exited(); exited {
			t.Fatalf("the writer stopped after %d rows (%d at the cut-over): %v", w.written(), atCutOver, err)
		}
		return w.written() >= atCutOver+500, fmt.Sprintf("%d written, %d at the cut-over, %d delivered", w.written(), atCutOver, w.got.Len())
	})
	if err := w.bg.Stop(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ids...)
}

// outboxColumns are producer_message's columns, as pt-online-schema-change
// names them in its triggers and copy.
const outboxColumns = "id, message_id, exchange, routing_key, content, status, retry_count, max_retry_count, next_retry_time, error_msg, create_time, update_time, version"

// maxID is the highest id of table.
func maxID(t *testing.T, db *testenv.DB, table string) int {
	t.Helper()
	return db.Count(t, "SELECT COALESCE(MAX(id), 0) FROM "+table)
}

// ghostCutOver changes producer_message the way gh-ost does: a ghost table
// created LIKE it, the rows copied in chunks by primary key while the
// writer goes on, then, with writes held (gh-ost's LOCK TABLES ... WRITE),
// the changes its binlog applier would still apply (rows inserted since the
// copy began, status changes: the relay's marks), and the swap. gh-ost keeps
// the old table (_del) unless told to drop it.
func ghostCutOver(t *testing.T, db *testenv.DB, w *streamWriter) (atCutOver int) {
	t.Helper()
	return ghostCopyThen(t, db, w, func() {
		db.Exec(t, "RENAME TABLE producer_message TO _producer_message_del, _producer_message_gho TO producer_message")
	})
}

// ghostCopyThen copies producer_message into _producer_message_gho as
// gh-ost does and runs swap with writes held.
func ghostCopyThen(t *testing.T, db *testenv.DB, w *streamWriter, swap func()) (atCutOver int) {
	t.Helper()
	db.Exec(t, "CREATE TABLE _producer_message_gho LIKE producer_message")
	top := maxID(t, db, "producer_message")
	for lo := 0; lo < top; lo += 500 {
		db.Exec(t, "INSERT IGNORE INTO _producer_message_gho SELECT * FROM producer_message WHERE id > ? AND id <= ? LOCK IN SHARE MODE", lo, min(lo+500, top))
	}
	w.hold.Lock()
	defer w.hold.Unlock()
	db.Exec(t, "INSERT IGNORE INTO _producer_message_gho SELECT * FROM producer_message WHERE id > ?", top)
	// gh-ost's lock holds the relay's marks too (they reach the new table
	// after the swap); here a mark can land between this sync and the
	// rename, in the old table only: the relay repeats its recent marks
	// under the configured name at the rename.
	db.Exec(t, `UPDATE _producer_message_gho g JOIN producer_message s ON g.id = s.id
		SET g.status = s.status, g.retry_count = s.retry_count, g.next_retry_time = s.next_retry_time, g.error_msg = s.error_msg,
		    g.update_time = s.update_time, g.version = s.version
		WHERE g.version <> s.version OR g.status <> s.status`)
	swap()
	return w.written()
}

// ghostTwoStepCutOver is ghostCutOver with gh-ost's --cut-over=two-step
// (and Facebook's OSC, which swaps the same way): the table renamed away in
// one statement, the ghost table renamed in under its name in another, a
// moment later; the relay's marks go on meanwhile and find no table.
func ghostTwoStepCutOver(t *testing.T, db *testenv.DB, w *streamWriter) (atCutOver int) {
	t.Helper()
	return ghostCopyThen(t, db, w, func() {
		db.Exec(t, "RENAME TABLE producer_message TO _producer_message_del")
		time.Sleep(1500 * time.Millisecond) // past relay.flush_interval: marks meet no table
		db.Exec(t, "RENAME TABLE _producer_message_gho TO producer_message")
	})
}

// execRetryingDeadlocks runs a statement, again when it is chosen as a
// deadlock victim (pt-online-schema-change retries a chunk so, --tries).
func execRetryingDeadlocks(t *testing.T, db *testenv.DB, q string, args ...any) {
	t.Helper()
	if err := execRetrying(db, q, args...); err != nil {
		t.Fatalf("exec %.80q: %v", q, err)
	}
}

// execRetrying runs q on the primary, again after a deadlock (up to ten
// tries, 10 ms more of a pause each time).
func execRetrying(db *testenv.DB, q string, args ...any) error {
	for try := 1; ; try++ {
		_, err := db.Primary.Exec(q, args...)
		var me *mysql.MySQLError
		if err == nil || !errors.As(err, &me) || me.Number != 1213 || try == 10 {
			return err
		}
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
	}
}

// ptOSCCutOver changes producer_message the way pt-online-schema-change
// does: triggers on the table write every change into the new table
// (REPLACE INTO, DELETE IGNORE), the rows are copied in chunks (INSERT
// LOW_PRIORITY IGNORE ... SELECT ... LOCK IN SHARE MODE) while the writer
// goes on, then the atomic swap, and the triggers and the old table are
// dropped (--drop-old-table, its default).
func ptOSCCutOver(t *testing.T, db *testenv.DB, w *streamWriter) (atCutOver int) {
	t.Helper()
	db.Exec(t, "CREATE TABLE _producer_message_new LIKE producer_message")
	newVals := "NEW.id, NEW.message_id, NEW.exchange, NEW.routing_key, NEW.content, NEW.status, NEW.retry_count, NEW.max_retry_count, " +
		"NEW.next_retry_time, NEW.error_msg, NEW.create_time, NEW.update_time, NEW.version"
	db.Exec(t, "CREATE TRIGGER pt_osc_del AFTER DELETE ON producer_message FOR EACH ROW "+
		"DELETE IGNORE FROM _producer_message_new WHERE _producer_message_new.id <=> OLD.id")
	db.Exec(t, "CREATE TRIGGER pt_osc_upd AFTER UPDATE ON producer_message FOR EACH ROW BEGIN "+
		"DELETE IGNORE FROM _producer_message_new WHERE !(OLD.id <=> NEW.id) AND _producer_message_new.id <=> OLD.id; "+
		"REPLACE INTO _producer_message_new ("+outboxColumns+") VALUES ("+newVals+"); END")
	db.Exec(t, "CREATE TRIGGER pt_osc_ins AFTER INSERT ON producer_message FOR EACH ROW "+
		"REPLACE INTO _producer_message_new ("+outboxColumns+") VALUES ("+newVals+")")
	top := maxID(t, db, "producer_message")
	for lo := 1; lo <= top; lo += 500 {
		execRetryingDeadlocks(t, db, "INSERT LOW_PRIORITY IGNORE INTO _producer_message_new ("+outboxColumns+") SELECT "+outboxColumns+
			" FROM producer_message FORCE INDEX(`PRIMARY`) WHERE id >= ? AND id <= ? LOCK IN SHARE MODE /*pt-online-schema-change*/", lo, min(lo+499, top))
	}
	db.Exec(t, "RENAME TABLE producer_message TO _producer_message_old, _producer_message_new TO producer_message")
	atCutOver = w.written()
	for _, tr := range []string{"pt_osc_del", "pt_osc_upd", "pt_osc_ins"} {
		db.Exec(t, "DROP TRIGGER IF EXISTS "+tr)
	}
	db.Exec(t, "DROP TABLE IF EXISTS _producer_message_old")
	return atCutOver
}

// While rows stream, an online schema change swaps a copy of the outbox
// table in; the sweeper runs with a short grace period, so a copy left
// PENDING would be sent again within the test. Every row is delivered
// exactly once, every row of the table in the end is SENT, the sweeper
// claims nothing and nothing is counted as already sent. The relay writes
// its marks once a second (relay.flush_interval, checkpoint.interval), so
// rows are published and not yet marked when the cut-over reaches it.
func TestOnlineSchemaChangeCutOverWhileRowsStream(t *testing.T) {
	testenv.Integration(t)
	for _, tc := range []struct {
		name    string
		cutOver func(*testing.T, *testenv.DB, *streamWriter) int
	}{
		{"gh-ost", ghostCutOver},
		{"gh-ost two-step", ghostTwoStepCutOver},
		{"pt-online-schema-change", ptOSCCutOver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testenv.NewDB(t, "schema/producer_message.sql")
			br, got := testenv.NewCollectedBroker(t)
			r := relaytest.StartRelay(t, relaytest.Config{Name: testenv.UniqueName("cutover"), Tables: relaytest.SeedTable(db.Name),
				Sections: map[string]string{"relay": "{flush_interval: 1s}", "checkpoint": "{interval: 1s}", "sweeper": "{interval: 200ms, grace_period: 15s}"}}.YAML())

			w := startStreamWriter(t, db, got, br.Exchange, "osc")
			waitReceived(t, got, 500, 30*time.Second)
			atCutOver := tc.cutOver(t, db, w)
			want := w.stop(t, atCutOver)

			waitAllDistinct(t, got, want, 60*time.Second)
			testenv.WaitFor(t, 60*time.Second, "every row of the table SENT", func() (bool, string) {
				n := pendingIn(t, db, "producer_message")
				return n == 0, fmt.Sprintf("%d not SENT", n)
			})
			// A last row: what the sweeper published before the rows were
			// all SENT is queued ahead of it.
			want = append(want, insertOrders(t, db, br.Exchange, "last", 1, 1)...)
			waitDeliveredOnceInOrder(t, got, want, 30*time.Second)
			if n := db.Count(t, "SELECT COUNT(*) FROM producer_message"); n != len(want) {
				t.Fatalf("%d rows in the table after the cut-over, want %d", n, len(want))
			}
			fams := gatherApp(t, r.App)
			claimed, _ := value(fams, "binlog_relay_sweeper_claims_total")
			already, _ := value(fams, "binlog_relay_published_already_sent_total")
			if claimed != 0 || already != 0 {
				t.Fatalf("sweeper_claims_total %v, published_already_sent_total %v; want 0 and 0 (no copy left PENDING, no duplicate)", claimed, already)
			}
		})
	}
}

// "ALTER TABLE t RENAME TO t_old" while rows stream, then a new t created
// LIKE it (its ids start at 1 again): the rows read before the rename end
// SENT in t_old, where they live, the new ones in t, and every row is
// delivered once. (Marks the relay wrote by name after the rename and
// before it read it found no table, or the new one with other messages
// under the same ids; they are written again to t_old at the rename, and
// those that found the new table are counted in
// published_already_sent_total, though published once.)
func TestAlterTableRenameWhileRowsStream(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, relaytest.Config{Name: testenv.UniqueName("alter-rename"), Tables: relaytest.SeedTable(db.Name),
		Sections: map[string]string{"relay": "{flush_interval: 1s}", "checkpoint": "{interval: 1s}", "sweeper": "{enabled: false}"}}.YAML())

	w := startStreamWriter(t, db, got, br.Exchange, "alter")
	waitReceived(t, got, 500, 30*time.Second)
	w.hold.Lock()
	db.Exec(t, "ALTER TABLE producer_message RENAME TO producer_message_old")
	atRename := w.written()
	db.Exec(t, "CREATE TABLE producer_message LIKE producer_message_old")
	w.hold.Unlock()
	want := w.stop(t, atRename)

	waitDeliveredOnceInOrder(t, got, want, 60*time.Second)
	testenv.WaitFor(t, 30*time.Second, "every row SENT in both tables", func() (bool, string) {
		a, b := pendingIn(t, db, "producer_message_old"), pendingIn(t, db, "producer_message")
		return a == 0 && b == 0, fmt.Sprintf("not SENT: %d in producer_message_old, %d in the new table", a, b)
	})
	if a, b := db.Count(t, "SELECT COUNT(*) FROM producer_message_old"), db.Count(t, "SELECT COUNT(*) FROM producer_message"); a != atRename || a+b != len(want) {
		t.Fatalf("%d rows in producer_message_old, %d in the new table; want %d and %d", a, b, atRename, len(want)-atRename)
	}
}

// A table renamed away and straight back in two statements ("RENAME TABLE
// t TO t_tmp", then "RENAME TABLE t_tmp TO t", as a tool that checks or
// repairs a table may do) while rows stream: the rows read before it live
// under the configured name again, and their marks reach them there, not a
// t_tmp that no longer exists. Every row is delivered once and ends SENT;
// the sweeper, with a short grace period, claims nothing.
func TestTableRenamedAwayAndBackWhileRowsStream(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	r := relaytest.StartRelay(t, relaytest.Config{Name: testenv.UniqueName("away-back"), Tables: relaytest.SeedTable(db.Name),
		Sections: map[string]string{"relay": "{flush_interval: 1s}", "checkpoint": "{interval: 1s}", "sweeper": "{interval: 200ms, grace_period: 10s}"}}.YAML())

	w := startStreamWriter(t, db, got, br.Exchange, "back")
	waitReceived(t, got, 500, 30*time.Second)
	var atRename int
	for range 3 {
		waitReceived(t, got, w.written(), 30*time.Second)
		w.hold.Lock()
		db.Exec(t, "RENAME TABLE producer_message TO producer_message_tmp")
		db.Exec(t, "RENAME TABLE producer_message_tmp TO producer_message")
		atRename = w.written()
		w.hold.Unlock()
		time.Sleep(300 * time.Millisecond) // rows published and not marked when the next one comes
	}
	want := w.stop(t, atRename)

	waitDeliveredOnceInOrder(t, got, want, 60*time.Second)
	testenv.WaitFor(t, 30*time.Second, "every row SENT", func() (bool, string) {
		n := pendingIn(t, db, "producer_message")
		return n == 0, fmt.Sprintf("%d not SENT", n)
	})
	// A row left PENDING would have been claimed before it was SENT.
	want = append(want, insertOrders(t, db, br.Exchange, "last", 1, 1)...)
	waitDeliveredOnceInOrder(t, got, want, 30*time.Second)
	claimed, _ := value(gatherApp(t, r.App), "binlog_relay_sweeper_claims_total")
	if claimed != 0 {
		t.Fatalf("sweeper_claims_total %v; want 0 (no row left PENDING)", claimed)
	}
}

// A row whose publish failed, with its retry recorded after the primary
// ran an archival rotation and before the relay read it: the record goes
// by name to the new table, which holds other rows under the same ids, and
// records nothing; when the relay reads the rename it records the retry
// again in the archive, where the row lives. The row is not left PENDING
// without a reason. (The relay's source is cut while the rotation runs, so
// the failure is recorded in that window.)
func TestFailureRecordedInARotationsWindowReachesTheArchive(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	unbound := testenv.NewExchange(t)
	px := testenv.Proxy(t, testenv.Addr(testenv.ReplicaDSN))
	r := relaytest.StartRelay(t, viaProxy(t, relaytest.Config{Name: testenv.UniqueName("fail-rotate"), Tables: relaytest.SeedTable(db.Name),
		Sections: map[string]string{"relay": "{flush_interval: 4s}", "checkpoint": "{interval: 4s}", "sweeper": "{enabled: false}"}}.YAML(), px))
	stats := &r.App.Relay().Stats

	// Another table's rows under the same ids, for the rotation to swap in.
	db.Exec(t, "CREATE TABLE producer_message_new LIKE producer_message")
	for i := 1; i <= 10; i++ {
		db.Exec(t, "INSERT INTO producer_message_new (id, message_id, exchange, routing_key, content) VALUES (?, ?, ?, 'order.created', '{}')",
			i, fmt.Sprintf("new-%d", i), br.Exchange)
	}
	// A sent row and an unroutable one in one transaction, until their
	// batch is still unwritten when the source is cut (the relay writes
	// its batches every 4 s: almost always).
	var failed string
	for try := 0; ; try++ {
		if try == 5 {
			t.Fatal("the relay wrote its batch before the source was cut, five times")
		}
		before := stats.Checkpoints.Load()
		ok, bad := fmt.Sprintf("ok-%d", try), fmt.Sprintf("bad-%d", try)
		db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, 'order.created', '{}'), (?, ?, 'order.created', '{}')",
			ok, br.Exchange, bad, unbound)
		waitAllDistinct(t, got, []string{ok}, 30*time.Second)
		testenv.WaitFor(t, 10*time.Second, "the unroutable row's failure", func() (bool, string) {
			return stats.Failed.Load() > int64(try), fmt.Sprintf("%d failed", stats.Failed.Load())
		})
		px.Cut()
		if stats.Checkpoints.Load() == before {
			failed = bad
			break
		}
		px.Restore()
	}
	testenv.WaitFor(t, 10*time.Second, "the source cut", func() (bool, string) { return px.Live() == 0, fmt.Sprint(px.Live(), " live") })
	before := stats.Checkpoints.Load()
	db.Exec(t, "RENAME TABLE producer_message TO producer_message_2026_11, producer_message_new TO producer_message")
	testenv.WaitFor(t, 15*time.Second, "the failure written by name", func() (bool, string) {
		return stats.Checkpoints.Load() > before, "no batch written"
	})
	px.Restore()

	testenv.WaitFor(t, 30*time.Second, "the retry recorded in the archive", func() (bool, string) {
		var status string
		var retries int
		var reason sql.NullString
		err := db.Primary.QueryRow("SELECT status, retry_count, error_msg FROM producer_message_2026_11 WHERE message_id = ?", failed).Scan(&status, &retries, &reason)
		if err != nil {
			return false, err.Error()
		}
		return status == "PENDING" && retries == 1 && reason.Valid && reason.String != "", fmt.Sprintf("%s, retry_count %d, error_msg %q", status, retries, reason.String)
	})
	if n := db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE status <> 'PENDING' OR retry_count <> 0"); n != 0 {
		t.Fatalf("%d rows of the new table written; want none (other messages under the same ids)", n)
	}
}

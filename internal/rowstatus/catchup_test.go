package rowstatus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// The replay check after a restart asks the replica which replayed rows are
// SENT; CatchUp first waits for the replica to apply the primary's latest
// marks. With the replica's SQL thread stopped, a mark made on the primary
// is not there: CatchUp says so within its bound and Sent does not see the
// row SENT. Once the thread runs, CatchUp returns and Sent sees it.
func TestCatchUpWaitsForTheReplicaToApplyTheMarks(t *testing.T) {
	testenv.Integration(t)
	tp := testenv.NewTopology(t, "schema/producer_message.sql")
	if _, err := tp.On(t, "switch1").Exec("INSERT INTO producer_message (id, message_id, exchange, content) VALUES (7, 'm-7', 'ex', '{}')"); err != nil {
		t.Fatal(err)
	}
	tp.WaitReplicated(t, "switch2", 30*time.Second)
	tb := outboxtest.Preset(t, "producer-message", tp.DB, nil)
	flavor, word := binlog.FlavorMariaDB, "SLAVE"
	if testenv.Current.MySQL {
		flavor, word = binlog.FlavorMySQL, "REPLICA"
	}
	r := rowstatus.SentReader{DB: tp.On(t, "switch2"), Primary: tp.On(t, "switch1"), Flavor: flavor}
	ctx := context.Background()

	tp.Exec(t, "switch2", "STOP "+word+" SQL_THREAD")
	stopped := true
	t.Cleanup(func() {
		if stopped {
			tp.Exec(t, "switch2", "START "+word+" SQL_THREAD")
		}
	})
	var m rowstatus.Marks
	m.Add(int64(7), "m-7")
	if n, err := rowstatus.NewWriter(tp.On(t, "switch1"), rowstatus.Retry{}).MarkSent(ctx, tb, m); err != nil || n != 1 {
		t.Fatalf("marking row 7 on the primary: %d rows, %v", n, err)
	}
	start := time.Now()
	_, err := r.CatchUp(ctx, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "had not applied the primary's position within 300ms") {
		t.Fatalf("CatchUp with the replica's SQL thread stopped: %v; want it not applied within 300ms", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("CatchUp took %s, bound 300ms", took)
	}
	if sent, err := r.Sent(ctx, tb, []any{int64(7)}); err != nil || len(sent) != 0 {
		t.Fatalf("Sent before the replica applied the mark: %v, %v; want none", sent, err)
	}

	tp.Exec(t, "switch2", "START "+word+" SQL_THREAD")
	stopped = false
	if _, err := r.CatchUp(ctx, 30*time.Second); err != nil {
		t.Fatalf("CatchUp with the replica running: %v", err)
	}
	sent, err := r.Sent(ctx, tb, []any{int64(7)})
	if err != nil || sent["7"] != "m-7" {
		t.Fatalf("Sent after CatchUp: %v, %v; want row 7 (m-7)", sent, err)
	}
}

// A relay whose source is the primary itself has nothing to wait for:
// CatchUp returns at once on both flavours (MariaDB's MASTER_GTID_WAIT
// would wait on gtid_slave_pos, which the primary's own writes never move).
func TestCatchUpOnThePrimaryItselfReturnsAtOnce(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	db.Exec(t, "INSERT INTO producer_message (id, message_id, exchange, content) VALUES (1, 'm-1', 'ex', '{}')")
	flavor := binlog.FlavorMariaDB
	if testenv.Current.MySQL {
		flavor = binlog.FlavorMySQL
	}
	r := rowstatus.SentReader{DB: db.Primary, Primary: db.Primary, Flavor: flavor}
	start := time.Now()
	if _, err := r.CatchUp(context.Background(), 2*time.Second); err != nil {
		t.Fatalf("CatchUp on the primary itself: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("CatchUp on the primary itself took %s; want at once", took)
	}
}

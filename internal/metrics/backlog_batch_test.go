package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Three tables of three shapes (text statuses with an hour-old PENDING row,
// numeric statuses, an epoch created column) read in one statement on the
// replica give each its own counts, oldest age and retry ratio; a table
// dropped among them is asked again alone and counted failed, and the
// others' gauges go on following their rows.
func TestBacklogBatchReadsEachTable(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql", "schema/local_message.sql", "schema/eventuate_message.sql")
	pm := outboxtest.Preset(t, "producer-message", db.Name, nil)
	lm := outboxtest.Preset(t, "local-message", db.Name, nil)
	ev := outboxtest.Preset(t, "eventuate", db.Name, nil)
	db.Exec(t, `INSERT INTO producer_message (id, message_id, exchange, content, status, retry_count, create_time, update_time) VALUES
		(1, 'a', 'ex', '{}', 'PENDING', 0, NOW() - INTERVAL 1 HOUR, NOW()), (2, 'b', 'ex', '{}', 'PENDING', 0, NOW(), NOW()),
		(3, 'c', 'ex', '{}', 'FAILED', 5, NOW(), NOW()), (4, 'd', 'ex', '{}', 'SENT', 0, NOW(), NOW())`)
	db.Exec(t, `INSERT INTO local_message (biz_id, biz_type, exchange, message_body, status) VALUES
		('o1', 'order', 'ex', '{}', 0), ('o2', 'order', 'ex', '{}', 0), ('o3', 'order', 'ex', '{}', 2), ('o4', 'order', 'ex', '{}', 1)`)
	db.Exec(t, `INSERT INTO message (id, destination, headers, payload, published, creation_time) VALUES
		('e1', 'd', '{}', '{}', 0, (UNIX_TIMESTAMP() - 120) * 1000), ('e2', 'd', '{}', '{}', 0, UNIX_TIMESTAMP() * 1000), ('e3', 'd', '{}', '{}', 1, UNIX_TIMESTAMP() * 1000)`)
	db.WaitReplicated(t, 30*time.Second)

	m := New()
	b := &Backlog{DB: db.Replica, Tables: []*outbox.Table{pm, lm, ev}, Interval: 50 * time.Millisecond,
		RatioInterval: 50 * time.Millisecond, Metrics: m, Log: zap.NewNop()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	rows := func(tb *outbox.Table, status string) float64 {
		return testutil.ToFloat64(m.outboxRows.WithLabelValues(tb.FullName(), status))
	}
	age := func(tb *outbox.Table) float64 {
		return testutil.ToFloat64(m.oldestPending.WithLabelValues(tb.FullName()))
	}
	waitUntil(t, 30*time.Second, func() bool {
		return rows(pm, StatusPending) == 2 && rows(lm, StatusPending) == 2 && rows(ev, StatusPending) == 2
	}, "PENDING gauges never reached 2, 2, 2")
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"producer_message FAILED", rows(pm, StatusFailed), 1},
		{"producer_message SENDING", rows(pm, StatusSending), 0},
		{"local_message FAILED", rows(lm, StatusFailed), 1},
		{"producer_message retry ratio", testutil.ToFloat64(m.retryRatio.WithLabelValues(pm.FullName())), 0.25},
		{"query errors", float64(testutil.CollectAndCount(m.outboxErrors)), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if a := age(pm); a < 3500 || a > 3900 {
		t.Errorf("producer_message oldest PENDING age %v, want about an hour", a)
	}
	if a := age(ev); a < 100 || a > 400 {
		t.Errorf("message (epoch ms) oldest PENDING age %v, want about two minutes", a)
	}

	db.Exec(t, "DROP TABLE local_message")
	db.Exec(t, `INSERT INTO producer_message (id, message_id, exchange, content, status, create_time) VALUES (5, 'e', 'ex', '{}', 'PENDING', NOW())`)
	db.Exec(t, `INSERT INTO message (id, destination, headers, payload, published, creation_time) VALUES ('e4', 'd', '{}', '{}', 0, UNIX_TIMESTAMP() * 1000)`)
	db.WaitReplicated(t, 30*time.Second)
	waitUntil(t, 30*time.Second, func() bool {
		return rows(pm, StatusPending) == 3 && rows(ev, StatusPending) == 3 &&
			testutil.ToFloat64(m.outboxErrors.WithLabelValues(lm.FullName())) > 0
	}, "after local_message was dropped: want PENDING 3 in producer_message and message, and query errors counted for local_message")
	for _, tb := range []*outbox.Table{pm, ev} {
		if n := testutil.ToFloat64(m.outboxErrors.WithLabelValues(tb.FullName())); n != 0 {
			t.Errorf("%s: %v query errors, want 0 (only the dropped table fails)", tb.FullName(), n)
		}
	}
}

func waitUntil(t *testing.T, within time.Duration, ok func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

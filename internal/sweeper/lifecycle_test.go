package sweeper

import (
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
)

// The oldest pending row's age is taken on the server, in the unit the
// table stores created_at in: a DATETIME, or Eventuate's epoch milliseconds.
func TestLifecycleOldestPendingAge(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewPrimaryDB(t, "schema/producer_message.sql", "schema/eventuate_message.sql")
	db.Exec(t, `INSERT INTO producer_message (message_id, exchange, routing_key, content, status, create_time)
		VALUES ('old', 'x', 'k', '{}', 'PENDING', NOW(3) - INTERVAL 1 HOUR), ('new', 'x', 'k', '{}', 'PENDING', NOW(3))`)
	db.Exec(t, `INSERT INTO message (id, destination, headers, payload, published, creation_time)
		VALUES ('old', 'x', '{}', '{}', 0, UNIX_TIMESTAMP(NOW(3)) * 1000 - 3600000), ('sent', 'x', '{}', '{}', 1, 0)`)
	for _, preset := range []string{"producer-message", "eventuate"} {
		l, err := ReadLifecycle(t.Context(), db.Primary, outboxtest.Preset(t, preset, db.Name, nil))
		if err != nil {
			t.Fatalf("%s: %v", preset, err)
		}
		if !l.HasPending || l.OldestPending < time.Hour || l.OldestPending > time.Hour+10*time.Second {
			t.Errorf("%s: oldest pending %s (pending %v), want an hour", preset, l.OldestPending, l.HasPending)
		}
	}
	db.Exec(t, "UPDATE message SET published = 1")
	l, err := ReadLifecycle(t.Context(), db.Primary, outboxtest.Preset(t, "eventuate", db.Name, nil))
	if err != nil || l.HasPending || l.OldestPending != 0 {
		t.Errorf("none pending: %+v, %v", l, err)
	}
}

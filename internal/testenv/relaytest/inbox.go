package relaytest

import (
	"database/sql"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

// StartInbox runs a pkg/inbox consumer, the service side of what the relay
// publishes, until Stop or the end of the test; its lines go to log under
// the name inbox.
func StartInbox(t testing.TB, cfg inbox.Config, db *sql.DB, h inbox.Handler, log *zap.Logger, opts ...inbox.Option) *Background {
	t.Helper()
	c, err := inbox.New(cfg, db, h, ops.SlogOf(log.Named("inbox")), opts...)
	if err != nil {
		t.Fatalf("inbox.New: %v", err)
	}
	b := Go("inbox consumer "+cfg.ConsumerName, 30*time.Second, c.Run)
	t.Cleanup(func() { _ = b.Stop() })
	return b
}

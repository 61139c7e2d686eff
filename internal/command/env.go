// Package command owns the relay's one-shot commands: status, sweep,
// requeue, replay and reconcile, and the flags of those that take more than
// --config. Each runs over the connections an app.App opened, handed in as
// an Env (app.App.Env fills it); cmd/binlog-relay dispatches to them.
//
// status.go prints what the relay's servers say (brokers.go the broker's
// nodes), sweep.go runs the sweeper alone, requeue.go puts FAILED rows back
// to PENDING, replay.go republishes a range of rows and reconcile.go
// compares the outbox with the consumers' inboxes; their flags are in
// options.go and replay.go.
package command

import (
	"context"
	"crypto/tls"
	"database/sql"
	"io"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/reconcile"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Env is what a command runs on: the relay's config, logger and
// connections, and what only the relay's App builds (its router,
// publishers, sweeper and reconciler, and its reads of the replica and the
// broker).
type Env struct {
	Cfg     *config.Config
	Log     *zap.Logger
	Source  *source.Source // the source replica read now: status and replay read it
	Primary *sql.DB        // requeue writes it; status pings it
	Redis   redis.UniversalClient
	Store   checkpoint.Store // the relay's checkpoint
	Reports reconcile.Store  // the last reconciliation's result, for status

	// NewRouter builds the relay's router (the messages replay publishes).
	NewRouter func() (*router.Router, error)
	// NewPublisher builds a broker publisher of its own, one ordered
	// confirming channel named connName.
	NewPublisher func(connName string, log *zap.Logger) (*publisher.Publisher, error)
	// NewSweeper builds the sweeper `run` runs (sweep runs it alone).
	NewSweeper func() (*sweeper.Sweeper, error)
	// NewReconciler connects to the consumers' inboxes and builds the
	// reconciler; close releases them.
	NewReconciler func() (rc *reconcile.Reconciler, close func(), err error)
	// ReplicaStatus prints status's lines on the source replica and the
	// primary; asked is false when the primary's position was not read
	// (the source's flavor is not known), err the primary's failure.
	ReplicaStatus func(ctx context.Context, w io.Writer, cp checkpoint.Checkpoint, haveCP bool) (asked bool, err error)
	// ProbeBroker dials each node of broker.urls once, within timeout;
	// nil: preflight.ProbeBrokerNodes.
	ProbeBroker func(ctx context.Context, b config.Broker, btls *tls.Config, timeout time.Duration) []preflight.NodeProbe
}

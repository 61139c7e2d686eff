package app

// The sweeper: the one inside `run`, the sweep command, and the connection
// its pre-checks read (the source replica, or the primary while the replica
// lags).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/status"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// sweeperService returns the sweeper to run inside `run`, or nil when
// sweeper.enabled is false.
func (a *App) sweeperService() service {
	if !a.Cfg.SweeperEnabled() {
		return nil
	}
	return func(ctx context.Context) error {
		s, err := a.newSweeper()
		if err != nil {
			return err
		}
		return s.Run(ctx)
	}
}

// newSweeper wires a sweeper with a publisher of its own (one ordered
// confirming channel beside the binlog path's): the replica for its
// pre-checks, the primary for claims and status writes.
func (a *App) newSweeper() (*sweeper.Sweeper, error) {
	cfg := a.Cfg
	rt, err := a.newRouter() // headers.go
	if err != nil {
		return nil, err
	}
	pub, err := a.newPublisher(cfg.Name+"-sweeper", false, false, a.Log.Named("sweeper.publisher"))
	if err != nil {
		return nil, err
	}
	precheck, err := a.precheckDB()
	if err != nil {
		return nil, err
	}
	s, err := sweeper.New(a.stages.sweeper, cfg.Tables, precheck, a.Primary,
		publisher.Stream[*sweeper.Claimed]{Publisher: pub}, rt, status.NewWriter(a.Primary, a.stages.retry), a.Log.Named("sweeper"))
	if err != nil {
		return nil, err
	}
	s.SetObserver(a.Metrics())
	return s, nil
}

// Sweep runs the sweeper alone (`binlog-relay sweep`) until ctx ends. Any
// number may run on any machines beside `run`: claims skip each other's
// rows.
func (a *App) Sweep(ctx context.Context) error {
	if err := a.Source.PingContext(ctx); err != nil {
		return fmt.Errorf("source %s (the sweeper's pre-checks): %w", a.source().Redacted(), err)
	}
	if err := a.Primary.PingContext(ctx); err != nil {
		return fmt.Errorf("primary %s: %w", a.Cfg.Primary.Redacted(), err)
	}
	s, err := a.newSweeper()
	if err != nil {
		return err
	}
	a.Log.Info("sweeper starting", zap.String("name", a.Cfg.Name))
	return s.Run(ctx)
}

// lifecycleStatus prints a table's oldest pending age, FAILED count and
// retry ratio (share of the rows updated in the last outbox.RetryRatioWindow
// that were retried outbox.RetriedFrom times or more), read from the source
// like the rest of `status`.
func (a *App) lifecycleStatus(ctx context.Context, w io.Writer, t *outbox.Table) {
	l, err := sweeper.ReadLifecycle(ctx, a.Source, t)
	if err != nil {
		fmt.Fprintf(w, "  lifecycle  %v\n", err)
		return
	}
	if l.HasPending {
		fmt.Fprintf(w, "  oldest pending  %s\n", l.OldestPending)
	} else {
		fmt.Fprintf(w, "  oldest pending  none\n")
	}
	if l.Failed >= 0 {
		fmt.Fprintf(w, "  failed          %d\n", l.Failed)
	}
	if l.RetryRatio >= 0 {
		fmt.Fprintf(w, "  retry ratio     %.1f%% (%d of %d rows updated in the last hour retried %d+ times)\n",
			100*l.RetryRatio, l.Retried, l.Recent, outboxsql.RetriedFrom)
	}
}

// precheckDB is where the sweeper inside `run` asks whether rows are due:
// the source replica while it replicates, the primary while it does not
// (a thread stopped, or the delay past sweeper.grace_period). A replica
// that stopped applying has none of the new rows, so its answer would hold
// every one of them until it is fixed; one indexed EXISTS per table and
// sweeper.interval on the primary is the price of sending them after the
// grace period. Each pre-check dials afresh (no idle connections) so it
// follows the replica's state.
func (a *App) precheckDB() (*sql.DB, error) {
	c := &precheckConnector{a: a, source: a.src}
	var err error
	if a.src == nil {
		if c.source, err = mysqlConnector(a.Cfg.Source, "source"); err != nil { // mysqlauth.go
			return nil, err
		}
	}
	if c.primary, err = mysqlConnector(a.Cfg.Primary, "primary"); err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(0)
	return db, nil
}

type precheckConnector struct {
	a               *App
	source, primary driver.Connector
}

func (c *precheckConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.a.replicaDegraded() {
		return c.primary.Connect(ctx)
	}
	return c.source.Connect(ctx)
}

func (c *precheckConnector) Driver() driver.Driver { return c.source.Driver() }

// replicaDegraded reports whether the source replica is not replicating
// or is further behind the primary than the sweeper's grace period.
func (a *App) replicaDegraded() bool {
	if a.replica.stopped.Load() != 0 {
		return true
	}
	d, ok := a.replica.Delay(time.Now())
	return ok && d > a.stages.sweeper.GracePeriod
}

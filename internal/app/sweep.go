package app

// The sweeper: the one inside `run` (the sweep command, internal/command's,
// runs it alone through Env.NewSweeper), and the connection its pre-checks
// read (the source replica, or the primary while the replica lags).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/internal/status"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
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

// precheckDB is where the sweeper inside `run` asks whether rows are due:
// the source replica while it replicates, the primary while it does not
// (a thread stopped, or the delay past sweeper.grace_period). A replica
// that stopped applying has none of the new rows, so its answer would hold
// every one of them until it is fixed; one indexed EXISTS per table and
// sweeper.interval on the primary is the price of sending them after the
// grace period. Each pre-check dials afresh (no idle connections) so it
// follows the replica's state.
func (a *App) precheckDB() (*sql.DB, error) {
	c := &precheckConnector{a: a}
	var err error
	if c.source, err = a.Source.NewConnector(); err != nil {
		return nil, err
	}
	if c.primary, err = source.Connector(a.Cfg.Primary, "primary"); err != nil {
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
	if a.replica.Stopped() {
		return true
	}
	d, ok := a.replica.Delay(time.Now())
	return ok && d > a.stages.sweeper.GracePeriod
}

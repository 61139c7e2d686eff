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
	"github.com/binlog-relay/binlog-relay/internal/replica"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
)

// sweep runs the sweeper inside `run` (with sweeper.enabled), beside the
// binlog path: it leaves alone the rows that path has not reached yet.
func (a *App) sweep(ctx context.Context) error {
	s, err := a.wire.sweeper()
	if err != nil {
		return err
	}
	s.SetBinlogPath(binlogProgress{a})
	if m := a.Matcher(); m != nil && m.HasPatterns() {
		a.tenants.init(a)
		a.tenants.follow(s) // tenants.go
		defer a.tenants.follow(nil)
	}
	a.console.sweeper.Store(s)
	defer a.console.sweeper.Store(nil)
	return s.Run(ctx)
}

// binlogProgress is how far this process's binlog path has come
// (sweeper.BinlogPath): the reader's position in time where every row it
// read is settled, else the last transaction the relay settled every row
// of. Nothing running (a standby): nothing heard, and the sweeper sweeps
// by the wall clock.
type binlogProgress struct{ a *App }

func (p binlogProgress) Progress(now time.Time) (time.Time, time.Duration) {
	rd, r := p.a.ops.reader.Load(), p.a.Relay()
	if rd == nil || r == nil {
		return time.Time{}, 0
	}
	behind := rd.Lag(now)
	marked, ok := r.MarkedThrough()
	if last, read := rd.LastCommit(); ok && read && (last.File != marked.File || last.Pos != marked.Pos) {
		// Rows read and not settled yet: the path is where its marks are.
		behind = max(behind, now.Sub(time.Unix(int64(marked.Time), 0)))
	}
	return rd.LastReceived(), behind
}

// sweeper wires a sweeper with a publisher of its own (one ordered
// confirming channel beside the binlog path's): the replica for its
// pre-checks, the primary for claims and status writes.
func (w *wiring) sweeper() (*sweeper.Sweeper, error) {
	cfg := w.cfg
	rt, err := w.router()
	if err != nil {
		return nil, err
	}
	pub, err := w.publisher(cfg.Name+"-sweeper", false, false, w.log.Named("sweeper.publisher"))
	if err != nil {
		return nil, err
	}
	precheck, err := w.precheckDB()
	if err != nil {
		return nil, err
	}
	s, err := sweeper.New(w.stages.sweeper, cfg.Tables, precheck, w.primary,
		publisher.Stream[*sweeper.Claimed]{Publisher: pub}, rt, rowstatus.NewWriter(w.primary, w.stages.retry), w.log.Named("sweeper"))
	if err != nil {
		return nil, err
	}
	s.SetObserver(w.metrics())
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
func (w *wiring) precheckDB() (*sql.DB, error) {
	c := &precheckConnector{degraded: w.degraded}
	var err error
	if c.source, err = w.source.NewConnector(); err != nil {
		return nil, err
	}
	if c.primary, err = source.Connector(w.cfg.Primary, "primary"); err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(0)
	return db, nil
}

type precheckConnector struct {
	degraded        func() bool
	source, primary driver.Connector
}

func (c *precheckConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.degraded() {
		return c.primary.Connect(ctx)
	}
	return c.source.Connect(ctx)
}

func (c *precheckConnector) Driver() driver.Driver { return c.source.Driver() }

// replicaDegraded reports whether the source replica is not replicating
// or is further behind the primary than grace (sweeper.grace_period).
func replicaDegraded(w *replica.Watch, grace time.Duration) bool {
	if w.Stopped() {
		return true
	}
	d, ok := w.Delay(time.Now())
	return ok && d > grace
}

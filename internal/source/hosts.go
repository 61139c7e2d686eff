package source

// source.hosts: the replicas listed, which one the relay reads now, and
// failover between them.

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// hosts is the list in source.hosts and which one the relay reads now.
// Source.DB dials the current one (hosts is its database/sql connector).
type hosts struct {
	hosts []config.MySQL // cfg.Source with each entry's host and port
	conns []driver.Connector
	cur   atomic.Int32
	log   *zap.Logger
	// ident is the identity (identityQuery) of the source choose picked
	// last, for the checkpoints; nil until choose has run.
	ident atomic.Pointer[string]

	behind map[int]string // replicas reported as lagging, with what they had
}

func newHosts(cfg config.MySQL, log *zap.Logger, dial Dial) (*hosts, error) {
	s := &hosts{log: log, behind: map[int]string{}}
	for i, m := range cfg.HostEntries() {
		c, err := dial(m, fmt.Sprintf("source.hosts[%d]", i))
		if err != nil {
			return nil, err
		}
		s.hosts = append(s.hosts, m)
		s.conns = append(s.conns, c)
	}
	return s, nil
}

// Connect dials the current source (driver.Connector).
func (s *hosts) Connect(ctx context.Context) (driver.Conn, error) {
	idx := s.cur.Load()
	c, err := s.conns[idx].Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &sourceConn{Conn: c, s: s, idx: idx}, nil
}

// Driver is the MySQL driver (driver.Connector).
func (s *hosts) Driver() driver.Driver { return s.conns[0].Driver() }

func (s *hosts) current() config.MySQL { return s.hosts[s.cur.Load()] }

// pick makes the first listed source that answers the current one.
func (s *hosts) pick(ctx context.Context) {
	for i := range s.hosts {
		_, err := s.query(ctx, i, "SELECT 1")
		if err == nil {
			s.cur.Store(int32(i))
			return
		}
		s.log.Warn("source does not answer; trying the next in source.hosts", zap.String("source", s.hosts[i].Addr()), zap.Error(err))
	}
}

// choose picks the source to stream from: at start the first listed, on a
// failure the next ones in turn (the failed one last), taking the first that
// answers and whose binlog holds the relay's GTID position. A replica that
// lags behind it is waited for, not read from: starting from a GTID it does
// not have yet would fail, or on servers without gtid_strict_mode skip rows.
// Without a GTID position there is no failover: binlog file and position
// differ between servers.
func (s *hosts) choose(ctx context.Context, pos binlog.Position, failed string) (string, uint16, error) {
	n := len(s.hosts)
	first := 0
	if failed != "" {
		first = int(s.cur.Load()) + 1
	}
	if !pos.HasGTID() {
		cur := s.current()
		if failed != "" {
			s.log.Error("source failover refused: the relay's position has no GTID, and binlog file/position differ between servers, so resuming on another replica could skip or repeat rows. Reconnecting to the same source; turn GTID on (MySQL: gtid_mode=ON, enforce_gtid_consistency=ON) to fail over",
				zap.String("source", failed), zap.String("binlog_file", pos.File), zap.Uint32("binlog_pos", pos.Pos))
		}
		return cur.Host, uint16(cur.Port), nil
	}
	q := "SELECT @@gtid_binlog_pos" // what a MariaDB replica can serve (log_slave_updates)
	if pos.Flavor == binlog.FlavorMySQL {
		q = "SELECT @@gtid_executed"
	}
	wait := backoff.Backoff{Initial: 250 * time.Millisecond, Max: 2 * time.Second}
	for {
		for i := 0; i < n; i++ {
			idx := (first + i) % n
			h := s.hosts[idx]
			have, err := s.query(ctx, idx, q)
			if err != nil {
				if ctx.Err() != nil {
					return "", 0, ctx.Err()
				}
				s.log.Warn("source candidate does not answer", zap.String("source", h.Addr()), zap.Error(err))
				continue
			}
			ok, err := binlog.ContainsGTID(pos.Flavor, have, pos.GTIDSet)
			if err != nil {
				s.log.Warn("source candidate: cannot compare GTID sets", zap.String("source", h.Addr()), zap.Error(err))
				continue
			}
			if !ok {
				if s.behind[idx] != have {
					s.log.Warn("replica is behind the relay's position: waiting for it to catch up rather than reading from it",
						zap.String("source", h.Addr()), zap.String("replica_gtid", have), zap.String("gtid", pos.GTIDSet))
					s.behind[idx] = have
				}
				continue
			}
			delete(s.behind, idx)
			if failed != "" {
				s.log.Warn("binlog source failed over", zap.String("from", failed), zap.String("to", h.Addr()),
					zap.String("gtid", pos.GTIDSet))
			}
			s.cur.Store(int32(idx))
			s.readIdentity(ctx, idx, pos.Flavor)
			return h.Host, uint16(h.Port), nil
		}
		if err := wait.Wait(ctx); err != nil {
			return "", 0, err
		}
	}
}

// readIdentity records source idx's identity for the checkpoints. A source
// that does not say is named by its address, with a warning: the checkpoint
// must not keep naming the source before a failover.
func (s *hosts) readIdentity(ctx context.Context, idx int, flavor string) {
	id, err := s.query(ctx, idx, identityQuery(flavor))
	if err != nil {
		id = s.hosts[idx].Addr()
		s.log.Warn("reading the source's identity failed; checkpoints name it by its address",
			zap.String("source", id), zap.Error(err))
	}
	s.ident.Store(&id)
}

// query runs a one-value query on source idx over a connection of its own.
func (s *hosts) query(ctx context.Context, idx int, q string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := s.conns[idx].Connect(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	qc, ok := c.(driver.QueryerContext)
	if !ok {
		return "", errors.New("the MySQL driver cannot run queries on a raw connection")
	}
	rows, err := qc.QueryContext(ctx, q, nil)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(dest); err != nil {
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s returned no row", q)
		}
		return "", err
	}
	switch v := dest[0].(type) {
	case []byte:
		return string(v), nil
	case string:
		return v, nil
	case nil:
		return "", nil
	default:
		return fmt.Sprint(v), nil
	}
}

// sourceConn is a pooled connection to one of source.hosts. Once the relay
// reads another one it reports itself invalid, so database/sql closes it
// instead of reusing it: an idle connection to the old replica would
// otherwise answer the checks, /readyz and the metrics after a failover
// while they name the new one.
type sourceConn struct {
	driver.Conn
	s   *hosts
	idx int32
}

var (
	_ driver.Validator          = (*sourceConn)(nil)
	_ driver.SessionResetter    = (*sourceConn)(nil)
	_ driver.QueryerContext     = (*sourceConn)(nil)
	_ driver.ExecerContext      = (*sourceConn)(nil)
	_ driver.ConnPrepareContext = (*sourceConn)(nil)
	_ driver.ConnBeginTx        = (*sourceConn)(nil)
	_ driver.Pinger             = (*sourceConn)(nil)
	_ driver.NamedValueChecker  = (*sourceConn)(nil)
)

// IsValid is asked when the connection goes back to the pool.
func (c *sourceConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok && !v.IsValid() {
		return false
	}
	return c.s.cur.Load() == c.idx
}

// ResetSession is called before an idle connection is reused.
func (c *sourceConn) ResetSession(ctx context.Context) error {
	if c.s.cur.Load() != c.idx {
		return driver.ErrBadConn // database/sql closes it and dials the current source
	}
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// The methods below pass the driver's optional interfaces through: embedding
// driver.Conn keeps only its three methods.

func (c *sourceConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if qc, ok := c.Conn.(driver.QueryerContext); ok {
		return qc.QueryContext(ctx, q, args)
	}
	return nil, driver.ErrSkip
}

func (c *sourceConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if ec, ok := c.Conn.(driver.ExecerContext); ok {
		return ec.ExecContext(ctx, q, args)
	}
	return nil, driver.ErrSkip
}

func (c *sourceConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	if pc, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return pc.PrepareContext(ctx, q)
	}
	return c.Prepare(q)
}

func (c *sourceConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if bc, ok := c.Conn.(driver.ConnBeginTx); ok {
		return bc.BeginTx(ctx, opts)
	}
	return nil, errors.New("the MySQL driver cannot begin a transaction with options")
}

func (c *sourceConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *sourceConn) CheckNamedValue(nv *driver.NamedValue) error {
	if nc, ok := c.Conn.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

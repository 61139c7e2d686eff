// Package source owns the relay's connections to its MySQL and MariaDB
// servers: the source replica it reads (one, or the list in source.hosts
// with failover between them), that source's flavor and identity, and how
// the relay signs in to a server (its password, or an RDS IAM token per
// connection).
//
// Everything that names or queries the source asks a Source, so it is
// always the one streamed from: its DB dials the current host, and Addr
// names it.
package source

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// Source is the source replica the relay reads: the only one, or the
// current one of source.hosts.
type Source struct {
	// DB is the pool to the source. With source.hosts it dials whichever
	// host is read now, so the checks, positions, schemas and metrics
	// follow a failover.
	DB *sql.DB

	cfg   config.MySQL
	hosts *hosts // nil with one source
	log   *zap.Logger

	mu       sync.Mutex
	flavor   string
	server   string // the identity read from serverAt
	serverAt string
}

// Dial makes the connector of one server section; field names it in
// errors. Connector is the relay's; tests put a fake here.
type Dial func(m config.MySQL, field string) (driver.Connector, error)

// Open prepares the source's pool; nothing is dialled until used.
func Open(cfg config.MySQL, log *zap.Logger) (*Source, error) { return New(cfg, log, Connector) }

// New is Open with the connectors made by dial.
func New(cfg config.MySQL, log *zap.Logger, dial Dial) (*Source, error) {
	s := &Source{cfg: cfg, log: log}
	c, err := dial(cfg, "source")
	if err != nil {
		return nil, err
	}
	if len(cfg.Hosts) > 1 {
		if s.hosts, err = newHosts(cfg, log, dial); err != nil {
			return nil, err
		}
		c = s.hosts
	}
	s.DB = sql.OpenDB(c)
	s.DB.SetMaxOpenConns(4)
	return s, nil
}

// Close closes the pool.
func (s *Source) Close() error { return s.DB.Close() }

// Current is the section of the source read now: the current one of
// source.hosts, which a failover moves, or the only one. Whatever names or
// dials the source reads it here, never the config's source.host, which is
// only the first of the list (the reader starts there but asks Failover
// before it dials).
func (s *Source) Current() config.MySQL {
	if s.hosts != nil {
		return s.hosts.current()
	}
	return s.cfg
}

// Addr is the source read now, host:port.
func (s *Source) Addr() string { return s.Current().Addr() }

// Pick makes the first listed source that answers the current one, before
// the start-up checks (a replica that is down at start is skipped).
func (s *Source) Pick(ctx context.Context) {
	if s.hosts != nil {
		s.hosts.pick(ctx)
	}
}

// Failover is the binlog reader's Failover, or nil with one source.
func (s *Source) Failover() binlog.FailoverFunc {
	if s.hosts == nil {
		return nil
	}
	return s.hosts.choose
}

// Flavor detects (once) whether the source is MySQL or MariaDB.
func (s *Source) Flavor(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flavor != "" {
		return s.flavor, nil
	}
	if f := s.cfg.Flavor; f == binlog.FlavorMySQL || f == binlog.FlavorMariaDB {
		s.flavor = f
		return f, nil
	}
	f, err := binlog.DetectFlavor(ctx, s.DB)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", s.Current().Redacted(), err)
	}
	s.flavor = f
	return f, nil
}

// Identity names the source in checkpoints: server_uuid on MySQL,
// server_id on MariaDB (which has no uuid). It is read again once the relay
// reads another of source.hosts, so an HA term after a failover names the
// replica it streams from.
func (s *Source) Identity(ctx context.Context) (string, error) {
	flavor, err := s.Flavor(ctx)
	if err != nil {
		return "", err
	}
	at := s.Addr()
	s.mu.Lock()
	server, serverAt := s.server, s.serverAt
	s.mu.Unlock()
	if server != "" && serverAt == at {
		return server, nil
	}
	if err := s.DB.QueryRowContext(ctx, identityQuery(flavor)).Scan(&server); err != nil {
		return "", fmt.Errorf("reading the source's identity: %w", err)
	}
	s.mu.Lock()
	s.server, s.serverAt = server, at
	s.mu.Unlock()
	return server, nil
}

// identityQuery reads what names a server in the checkpoint: MySQL's
// server_uuid, MariaDB's server_id (it has no UUID).
func identityQuery(flavor string) string {
	if flavor == binlog.FlavorMySQL {
		return "SELECT @@server_uuid"
	}
	return "SELECT CONCAT('server_id=', @@server_id)"
}

// CheckpointServer names the source in each checkpoint: the one read at
// start, and after a failover the one Failover moved to.
func (s *Source) CheckpointServer(atStart string) func() string {
	return func() string {
		if s.hosts != nil {
			if id := s.hosts.ident.Load(); id != nil {
				return *id
			}
		}
		return atStart
	}
}

// Position is where the source's binlog ends now.
func (s *Source) Position(ctx context.Context) (binlog.Position, error) {
	flavor, err := s.Flavor(ctx)
	if err != nil {
		return binlog.Position{}, err
	}
	return binlog.CurrentPosition(ctx, s.DB, flavor)
}

// NewConnector dials the source read now, for a pool of the caller's own.
func (s *Source) NewConnector() (driver.Connector, error) {
	if s.hosts != nil {
		return s.hosts, nil
	}
	return Connector(s.cfg, "source")
}

package app

// Connections: the source and primary pools, the Redis client and the
// checkpoint store (opening dials nothing; the first use does), and what
// the relay reads off the servers before streaming: the source's flavor and
// identity, its binlog position, where to start, the primary's GTID
// position.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// Open prepares connections; nothing is dialled until used.
func Open(cfg *config.Config, log *zap.Logger) (*App, error) {
	if err := checkStages(cfg); err != nil { // stages.go
		return nil, err
	}
	a := &App{Cfg: cfg, Log: log}
	routeRedisLogs(log)
	dsn, err := cfg.Source.DSN("source")
	if err != nil {
		return nil, err
	}
	if a.Source, err = sql.Open("mysql", dsn); err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	if len(cfg.Source.Hosts) > 1 { // a.Source dials whichever is read now (source.go)
		if a.src, err = newSources(cfg.Source, log.Named("source")); err != nil {
			return nil, err
		}
		_ = a.Source.Close()
		a.Source = sql.OpenDB(a.src)
	}
	a.Source.SetMaxOpenConns(4)
	if dsn, err = cfg.Primary.DSN("primary"); err != nil {
		return nil, err
	}
	if a.Primary, err = sql.Open("mysql", dsn); err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	a.Primary.SetMaxOpenConns(8)
	a.Primary.SetConnMaxIdleTime(5 * time.Minute)
	rtls, err := cfg.Redis.TLS.TLSConfig("redis")
	if err != nil {
		return nil, err
	}
	a.Redis = redis.NewClient(&redis.Options{Addr: cfg.Redis.Addr, Username: cfg.Redis.Username,
		Password: cfg.Redis.Password, DB: cfg.Redis.DB, TLSConfig: rtls,
		DialTimeout: 3 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
		MaxRetries: 1})
	a.Store = checkpoint.NewRedis(a.Redis, cfg.Checkpoint.Key)
	return a, nil
}

// Close releases the connections.
func (a *App) Close() {
	_ = a.Source.Close()
	_ = a.Primary.Close()
	_ = a.Redis.Close()
}

// connector dials one MySQL server; field names it in errors.
func connector(dsn, field string) (driver.Connector, error) {
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	c, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return c, nil
}

// Flavor detects (once) whether the source is MySQL or MariaDB.
func (a *App) Flavor(ctx context.Context) (string, error) {
	if a.flavor != "" {
		return a.flavor, nil
	}
	if f := a.Cfg.Source.Flavor; f == "mysql" || f == "mariadb" {
		a.flavor = f
		return f, nil
	}
	f, err := binlog.DetectFlavor(ctx, a.Source)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", a.source().Redacted(), err)
	}
	a.flavor = f
	return a.flavor, nil
}

// ServerIdentity names the source in checkpoints: server_uuid on MySQL,
// server_id on MariaDB (which has no uuid). It is read again once the relay
// reads another of source.hosts, so an HA term after a failover names the
// replica it streams from.
func (a *App) ServerIdentity(ctx context.Context) (string, error) {
	at := a.sourceAddr()
	if a.server != "" && a.serverAt == at {
		return a.server, nil
	}
	flavor, err := a.Flavor(ctx)
	if err != nil {
		return "", err
	}
	var server string
	if err := a.Source.QueryRowContext(ctx, identityQuery(flavor)).Scan(&server); err != nil {
		return "", fmt.Errorf("reading the source's identity: %w", err)
	}
	a.server, a.serverAt = server, at
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

// CurrentPosition is where the source's binlog ends now.
func (a *App) CurrentPosition(ctx context.Context) (binlog.Position, error) {
	flavor, err := a.Flavor(ctx)
	if err != nil {
		return binlog.Position{}, err
	}
	return binlog.CurrentPosition(ctx, a.Source, flavor)
}

// StartPosition is the saved checkpoint or, without one, the source's
// current position (rows committed earlier are the sweeper's).
func (a *App) StartPosition(ctx context.Context) (binlog.Position, bool, error) {
	p, cp, err := a.startPosition(ctx)
	return p, cp != nil, err
}

// startPosition is StartPosition with the checkpoint it resumes (nil without
// one).
func (a *App) startPosition(ctx context.Context) (binlog.Position, *checkpoint.Checkpoint, error) {
	cp, err := a.Store.Load(ctx)
	if err == nil {
		return cp.Position(), &cp, nil
	}
	if !errors.Is(err, checkpoint.ErrNotFound) {
		return binlog.Position{}, nil, err
	}
	p, err := a.CurrentPosition(ctx)
	return p, nil, err
}

// primaryPosition reads the primary's GTID position: one variable, no
// table. SHOW GLOBAL VARIABLES rather than SELECT @@: the same read, and the
// primary's Com_select keeps counting only real queries (the relay sends the
// primary none in steady state). Empty when the primary has GTIDs off.
func (a *App) primaryPosition(ctx context.Context, flavor string) (string, error) {
	name := "gtid_binlog_pos"
	if flavor == binlog.FlavorMySQL {
		name = "gtid_executed"
	}
	var n, v sql.NullString
	err := a.Primary.QueryRowContext(ctx, "SHOW GLOBAL VARIABLES LIKE '"+name+"'").Scan(&n, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the primary's GTID position: %w", err)
	}
	return strings.ReplaceAll(v.String, "\n", ""), nil
}

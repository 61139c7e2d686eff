package app

// Connections: the source and primary pools, the Redis client and the
// checkpoint store. Opening dials nothing; the first use does.

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/checkpoint"
	"github.com/binlog-relay/binlog-relay/internal/config"
)

// Open prepares connections; nothing is dialled until used.
func Open(cfg *config.Config, log *zap.Logger) (*App, error) {
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
	a.Store = &checkpoint.Redis{Client: a.Redis, Key: cfg.Checkpoint.Key}
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

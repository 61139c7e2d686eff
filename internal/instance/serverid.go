package instance

// One relay per source.server_id: SHOW SLAVE HOSTS for another replica
// using this relay's server_id (the source drops one of two such streams).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// Source is the source the relay streams from, as ServerIDs reads it.
type Source interface {
	// DB is the pool of the source.
	DB() *sql.DB
	// Addr is the address of the source read now (host:port).
	Addr() string
	// Flavor is binlog.FlavorMySQL or binlog.FlavorMariaDB.
	Flavor(ctx context.Context) (string, error)
}

// ServerIDs looks for other replicas of the source registered with this
// relay's source.server_id.
type ServerIDs struct {
	cfg    Config
	redis  redis.UniversalClient
	source Source
	log    *zap.Logger
	logged atomic.Bool // a refused stream was logged (once per process)
}

// NewServerIDs makes the server_id checks of cfg.ServerID on src; rdb
// holds the leader lease with ha.enabled.
func NewServerIDs(cfg Config, rdb redis.UniversalClient, src Source, log *zap.Logger) *ServerIDs {
	return &ServerIDs{cfg: cfg, redis: rdb, source: src, log: log}
}

// IsServerIDConflict reports whether err is the source dropping the stream
// because another replica connected with the same server_id. The message
// test covers a reader that still wraps it as a purged position.
func IsServerIDConflict(err error) bool {
	return errors.Is(err, binlog.ErrServerIDConflict) ||
		(err != nil && strings.Contains(err.Error(), "same server_uuid/server_id"))
}

// Hint is the operator's fix for a server_id conflict.
func (s *ServerIDs) Hint() string {
	return fmt.Sprintf("another replica of source %s uses source.server_id %d (a second relay with this config, or a replica given that id): give each relay its own source.server_id (SHOW SLAVE HOSTS on the source lists them)",
		s.source.Addr(), s.cfg.ServerID)
}

// Registered lists the replicas registered on the source (SHOW SLAVE
// HOSTS) with this relay's source.server_id, as host:port. With ha.enabled
// the leader of this name streams with it: not a conflict while the lease
// is held.
func (s *ServerIDs) Registered(ctx context.Context) ([]string, error) {
	id := s.cfg.ServerID
	if id == 0 {
		return nil, nil
	}
	// SHOW REPLICAS on MySQL (8.0.22+; MySQL 9 removed SHOW SLAVE HOSTS),
	// SHOW SLAVE HOSTS on MariaDB and older MySQL.
	first, second := "SHOW SLAVE HOSTS", "SHOW REPLICAS"
	if f, _ := s.source.Flavor(ctx); f == binlog.FlavorMySQL {
		first, second = second, first
	}
	db := s.source.DB()
	rows, err := db.QueryContext(ctx, first)
	if err != nil {
		var err2 error
		if rows, err2 = db.QueryContext(ctx, second); err2 != nil {
			return nil, err
		}
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		raw := make([][]byte, len(cols))
		for i := range vals {
			vals[i] = &raw[i]
		}
		if err := rows.Scan(vals...); err != nil {
			return nil, err
		}
		var sid, host, port string
		for i, col := range cols {
			switch col {
			case "Server_id", "Server_Id":
				sid = string(raw[i])
			case "Host":
				host = string(raw[i])
			case "Port":
				port = string(raw[i])
			}
		}
		if sid == strconv.FormatUint(uint64(id), 10) {
			out = append(out, host+":"+port)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) > 0 && s.cfg.HA {
		if v, _ := s.redis.Get(ctx, s.cfg.LeaderKey).Result(); v != "" {
			return nil, nil
		}
	}
	return out, nil
}

// WaitFree waits up to TTL for a replica registered with this relay's
// server_id to go (the stream of a relay that just died ends when the
// source next writes to it); the start-up checks then refuse a live one.
func (s *ServerIDs) WaitFree(ctx context.Context) {
	deadline := time.Now().Add(TTL)
	for {
		others, err := s.Registered(ctx)
		if err != nil || len(others) == 0 || time.Now().After(deadline) {
			return
		}
		s.log.Warn("a replica with this relay's source.server_id is connected to the source; waiting for it to go before refusing to start",
			zap.Uint32("server_id", s.cfg.ServerID), zap.Strings("registered_as", others))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// Refused looks, while the binlog stream is down, for another replica
// registered on the source with this relay's source.server_id: the source
// refuses or drops a second stream with one id (MariaDB: error 4052 or
// 1236), so the reader would reconnect in vain. It is named on /readyz
// (notice, for holdFor) and logged once; the reader keeps retrying from its
// position, never ahead.
func (s *ServerIDs) Refused(ctx context.Context, notice *ops.Notice, holdFor time.Duration) {
	if s.cfg.ServerID == 0 {
		return
	}
	others, err := s.Registered(ctx)
	if err != nil || len(others) == 0 {
		return
	}
	hint := s.Hint()
	notice.Set("binlog stream from "+s.source.Addr()+" is refused: "+hint, holdFor)
	if s.logged.CompareAndSwap(false, true) {
		s.log.Error("binlog stream refused by the source: another replica is connected with this relay's server_id. The reader retries from its position; nothing is skipped",
			zap.Uint32("server_id", s.cfg.ServerID), zap.Strings("registered_as", others), zap.String("fix", hint))
	}
}

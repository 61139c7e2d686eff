package command

// The status command: what the relay's servers say, and the servers it
// needs that did not answer.

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// Status prints the checkpoint, how far the source is ahead of it, the
// source replica and the primary (Env.ReplicaStatus), the broker's nodes
// and the one the relay's connections are on (brokers.go), and the outbox counts by status (read from the source,
// not the primary). It prints all it can read and then returns an error
// naming each server it needs that did not answer (Redis, the source
// replica, the primary), so `status` fails when it could not say what it
// was asked; the broker is not one of them.
func Status(ctx context.Context, e Env, w io.Writer) error {
	var down []error
	failed := func(what, addr string, err error) { down = append(down, serverError(what, addr, err)) }
	cp, err := e.Store.Load(ctx)
	haveCP, redisUp := err == nil, true
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		fmt.Fprintf(w, "checkpoint   none saved under %s (the relay will start at the current position)\n", e.Cfg.Checkpoint.Key)
	case err != nil:
		fmt.Fprintf(w, "checkpoint   %v\n", err)
		if !isNetError(err) {
			// Redis may have answered, with a checkpoint that does not decode.
			err = cmp.Or(e.Redis.Ping(ctx).Err(), err)
		}
		redisUp = !isNetError(err)
		failed("redis", e.Cfg.Redis.Endpoint(), err)
	default:
		fmt.Fprintf(w, "checkpoint   %s (saved %s ago, source %s)\n", cp.Position(), time.Since(cp.SavedAt).Round(time.Second), cp.Server)
	}
	now, err := e.Source.Position(ctx)
	sourceUp := err == nil
	if err != nil {
		fmt.Fprintf(w, "source       unreachable: %v\n", err)
		failed("source", e.Source.Addr(), err)
	} else {
		fmt.Fprintf(w, "source       %s\n", now)
	}
	asked, err := e.ReplicaStatus(ctx, w, cp, haveCP)
	if !asked {
		// Without the source's flavor the primary's position was not read;
		// whether it answers still counts.
		if err = e.Primary.PingContext(ctx); err != nil {
			fmt.Fprintf(w, "primary      %s: %v\n", e.Cfg.Primary.Addr(), err)
		} else {
			fmt.Fprintf(w, "primary      %s answers; its position is not read (the source's flavor is not known)\n", e.Cfg.Primary.Addr())
		}
	}
	if err != nil {
		failed("primary", e.Cfg.Primary.Addr(), err)
	}
	e.brokerStatus(ctx, w) // brokers.go
	for _, t := range e.Cfg.Tables {
		if t.Columns.Status == "" {
			continue
		}
		if !sourceUp {
			fmt.Fprintf(w, "table        %s: not read (the source is unreachable)\n", t.FullName())
			continue
		}
		rows, err := e.Source.DB.QueryContext(ctx, outboxsql.CountByStatusSQL(t, nil))
		if err != nil {
			fmt.Fprintf(w, "table        %s: %v\n", t.FullName(), err)
			continue
		}
		fmt.Fprintf(w, "table        %s\n", t.FullName())
		for rows.Next() {
			var s string
			var n int64
			if err := rows.Scan(&s, &n); err != nil {
				break
			}
			fmt.Fprintf(w, "  %-10s %d\n", s, n)
		}
		rows.Close()
		e.lifecycleStatus(ctx, w, t) // sweep.go
	}
	if redisUp {
		e.reconcileStatus(ctx, w) // reconcile.go
	} else if len(e.Cfg.Reconcile.Consumers) > 0 {
		fmt.Fprintf(w, "reconcile    not read (redis is unreachable)\n")
	}
	return errors.Join(down...)
}

// serverError says that the server what at addr did not answer status: it
// could not be reached (a network error), or it answered with an error.
// The errors of the drivers name addresses and users, never passwords.
func serverError(what, addr string, err error) error {
	if isNetError(err) {
		return fmt.Errorf("%s %s could not be reached: %w", what, addr, err)
	}
	return fmt.Errorf("%s %s answered with an error: %w", what, addr, err)
}

// isNetError reports whether err says a server could not be reached.
func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn)
}

package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// Status prints the checkpoint, how far the source is ahead of it, and the
// outbox counts by status (read from the source, not the primary).
func (a *App) Status(ctx context.Context, w io.Writer) error {
	cp, err := a.Store.Load(ctx)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		fmt.Fprintf(w, "checkpoint   none saved under %s (the relay will start at the current position)\n", a.Cfg.Checkpoint.Key)
	case err != nil:
		return err
	default:
		fmt.Fprintf(w, "checkpoint   %s (saved %s ago, source %s)\n", cp.Position(), time.Since(cp.SavedAt).Round(time.Second), cp.Server)
	}
	if now, err := a.CurrentPosition(ctx); err != nil {
		fmt.Fprintf(w, "source       unreachable: %v\n", err)
	} else {
		fmt.Fprintf(w, "source       %s\n", now)
	}
	a.replicaStatus(ctx, w, cp, err == nil) // replica.go
	for _, t := range a.Cfg.Tables {
		if t.Columns.Status == "" {
			continue
		}
		rows, err := a.Source.QueryContext(ctx, outboxsql.CountByStatusSQL(t, nil))
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
		a.lifecycleStatus(ctx, w, t)
	}
	a.reconcileStatus(ctx, w) // reconcile.go
	return nil
}

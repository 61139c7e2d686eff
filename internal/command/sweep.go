package command

// The sweep command, and the sweeper's lines in `status`.

import (
	"context"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Sweep runs the sweeper alone (`binlog-relay sweep`) until ctx ends. Any
// number may run on any machines beside `run`: claims skip each other's
// rows.
func Sweep(ctx context.Context, e Env) error {
	if err := e.Source.DB.PingContext(ctx); err != nil {
		return fmt.Errorf("source %s (the sweeper's pre-checks): %w", e.Source.Current().Redacted(), err)
	}
	if err := e.Primary.PingContext(ctx); err != nil {
		return fmt.Errorf("primary %s: %w", e.Cfg.Primary.Redacted(), err)
	}
	s, err := e.NewSweeper()
	if err != nil {
		return err
	}
	e.Log.Info("sweeper starting", zap.String("name", e.Cfg.Name))
	return s.Run(ctx)
}

// lifecycleStatus prints a table's oldest pending age, FAILED count and
// retry ratio (share of the rows updated in the last outbox.RetryRatioWindow
// that were retried outbox.RetriedFrom times or more), read from the source
// like the rest of `status`.
func (e Env) lifecycleStatus(ctx context.Context, w io.Writer, t *outbox.Table) {
	l, err := sweeper.ReadLifecycle(ctx, e.Source.DB, t)
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

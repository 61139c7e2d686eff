package command

// The requeue command: FAILED rows back to PENDING.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Requeue puts FAILED rows back to PENDING with retry_count reset, on the
// primary; the binlog path sends them at once (the sweeper a grace period
// later, if it has not). With --dry-run it only counts them, on the source
// replica.
func Requeue(ctx context.Context, e Env, o RequeueOptions, w io.Writer) error {
	res, err := RunRequeue(ctx, e, o)
	if err != nil {
		return err
	}
	if res.DryRun {
		fmt.Fprintf(w, "dry run: %d FAILED rows of %s would be requeued (counted on the source replica; nothing was written)\n", res.Rows, res.Table.FullName())
		return nil
	}
	fmt.Fprintf(w, "requeued %d FAILED rows of %s: PENDING, retry count 0, due now (the binlog path sends them at once; the sweeper after sweeper.grace_period if it does not)\n", res.Rows, res.Table.FullName())
	return nil
}

// RequeueResult is what a requeue did, or with DryRun would do.
type RequeueResult struct {
	Table  *outbox.Table
	Rows   int64
	DryRun bool
}

// RunRequeue is Requeue without the printing (the console calls it): the
// rows moved on the primary, or with o.DryRun counted on the source
// replica.
func RunRequeue(ctx context.Context, e Env, o RequeueOptions) (RequeueResult, error) {
	if err := o.Validate(); err != nil {
		return RequeueResult{}, err
	}
	t, err := e.requeueTable(o.Table)
	if err != nil {
		return RequeueResult{}, err
	}
	f := sweeper.RequeueFilter{IDs: o.IDs, Error: o.Error}
	if !o.Since.IsZero() {
		if f.Since = time.Since(o.Since); f.Since <= 0 {
			return RequeueResult{}, fmt.Errorf("requeue: --since %s is in the future", o.Since.Format(time.RFC3339))
		}
	}
	res := RequeueResult{Table: t, DryRun: o.DryRun}
	if o.DryRun {
		res.Rows, err = sweeper.RequeueCount(ctx, e.Source.DB(), t, f)
	} else {
		res.Rows, err = sweeper.Requeue(ctx, e.Primary, t, f)
	}
	return res, err
}

// requeueTable picks the table: the one named, or the only one with a
// failed status.
func (e Env) requeueTable(name string) (*outbox.Table, error) {
	candidates := config.MatchTables(e.Cfg.Tables, name)
	if name == "" {
		candidates = nil
		for _, t := range e.Cfg.Tables {
			if t.Columns.Status != "" && t.Statuses.Failed != "" {
				candidates = append(candidates, t)
			}
		}
	}
	var names []string
	for _, t := range e.Cfg.Tables {
		names = append(names, t.FullName())
	}
	switch {
	case len(candidates) == 1:
		return candidates[0], nil
	case name == "" && len(candidates) == 0:
		return nil, errors.New("requeue: no configured table has a failed status")
	case name == "":
		return nil, fmt.Errorf("requeue: several tables have a failed status; name one with --table (%s)", strings.Join(names, ", "))
	case len(candidates) == 0:
		return nil, fmt.Errorf("requeue: --table %s is not configured (%s)", name, strings.Join(names, ", "))
	default:
		return nil, fmt.Errorf("requeue: --table %s is ambiguous; use schema.table", name)
	}
}

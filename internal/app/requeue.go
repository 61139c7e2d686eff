package app

// The requeue command: FAILED rows back to PENDING.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/outbox"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
)

// RequeueOptions are `binlog-relay requeue`'s flags.
type RequeueOptions struct {
	Failed bool
	// Since keeps rows that failed at or after this time (zero: any).
	Since time.Time
	IDs   []string
	Table string
}

// Flags registers --failed, --since, --id and --table on fs.
func (o *RequeueOptions) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Failed, "failed", false, "put FAILED rows back to PENDING (required)")
	fs.Func("since", "only rows that failed since this time: RFC 3339 (2024-05-01T10:00:00Z) or a duration back from now (2h)", func(s string) error {
		t, err := ParseSince(s, time.Now())
		o.Since = t
		return err
	})
	fs.Func("id", "only this row id (repeatable, or comma-separated)", func(s string) error {
		for _, id := range strings.Split(s, ",") {
			if id = strings.TrimSpace(id); id != "" {
				o.IDs = append(o.IDs, id)
			}
		}
		return nil
	})
	fs.StringVar(&o.Table, "table", "", "schema.table to requeue (needed when several tables have a failed status)")
}

// Validate checks the flags before anything connects.
func (o *RequeueOptions) Validate() error {
	if !o.Failed {
		return errors.New("requeue: --failed is required (it names what is requeued: FAILED rows)")
	}
	return nil
}

// ParseSince reads --since: an RFC 3339 time, or a duration back from now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a positive duration like 2h", s)
	}
	return now.Add(-d), nil
}

// Requeue puts FAILED rows back to PENDING with retry_count reset, on the
// primary; the sweeper sends them on its next round.
func (a *App) Requeue(ctx context.Context, o RequeueOptions, w io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	t, err := a.requeueTable(o.Table)
	if err != nil {
		return err
	}
	f := sweeper.RequeueFilter{IDs: o.IDs}
	if !o.Since.IsZero() {
		if f.Since = time.Since(o.Since); f.Since <= 0 {
			return fmt.Errorf("requeue: --since %s is in the future", o.Since.Format(time.RFC3339))
		}
	}
	n, err := sweeper.Requeue(ctx, a.Primary, t, f)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "requeued %d FAILED rows of %s: PENDING, retry count 0, due now (the sweeper sends them)\n", n, t.FullName())
	return nil
}

// requeueTable picks the table: the one named, or the only one with a
// failed status.
func (a *App) requeueTable(name string) (*outbox.Table, error) {
	var candidates []*outbox.Table
	for _, t := range a.Cfg.Tables {
		switch {
		case name == "" && t.Columns.Status != "" && t.Statuses.Failed != "":
			candidates = append(candidates, t)
		case name != "" && (strings.EqualFold(t.FullName(), name) || strings.EqualFold(t.Name, name)):
			candidates = append(candidates, t)
		}
	}
	var names []string
	for _, t := range a.Cfg.Tables {
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

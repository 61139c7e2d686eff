package command

// The flags of run, requeue and reconcile (replay's are in replay.go).
// cmd/binlog-relay registers them; Validate runs before anything connects.

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// RequeueOptions are `binlog-relay requeue`'s flags.
type RequeueOptions struct {
	Failed bool
	// Since keeps rows that failed at or after this time (zero: any).
	Since time.Time
	IDs   []string
	Table string
	// Error keeps only the rows whose error column is exactly this text
	// (nil: any).
	Error *string
	// DryRun counts the rows on the source replica and writes nothing.
	DryRun bool
}

// Flags registers --failed, --since, --id, --table, --error and --dry-run
// on fs.
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
	fs.Func("error", "only rows whose error column is exactly this text (\"\" for none)", func(s string) error {
		o.Error = &s
		return nil
	})
	fs.BoolVar(&o.DryRun, "dry-run", false, "count the rows on the source replica; write nothing")
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

// ReconcileOptions are `binlog-relay reconcile`'s flags.
type ReconcileOptions struct {
	Since, Until time.Time
	Tables       []string
	Repair       bool
	Format       string
}

// Flags registers --since, --until, --table, --repair and --format on fs.
func (o *ReconcileOptions) Flags(fs *flag.FlagSet) {
	now := time.Now()
	fs.Func("since", "outbox rows created since this time: RFC 3339 or a duration back from now (default: reconcile.window, 24h)", func(s string) error {
		t, err := ParseSince(s, now)
		o.Since = t
		return err
	})
	fs.Func("until", "outbox rows created before this time: RFC 3339 or a duration back from now (default: now)", func(s string) error {
		t, err := ParseSince(s, now)
		o.Until = t
		return err
	})
	fs.Func("table", "only this outbox table, schema.name (repeatable)", func(s string) error {
		o.Tables = append(o.Tables, s)
		return nil
	})
	fs.BoolVar(&o.Repair, "repair", false, "reset the SENT rows no consumer processed to PENDING on the primary, so the sweeper sends them again")
	fs.StringVar(&o.Format, "format", "table", "output: table (for people) or json (for scripts)")
}

// Validate checks the flags before anything connects.
func (o *ReconcileOptions) Validate() error {
	if o.Format != "table" && o.Format != "json" {
		return fmt.Errorf("reconcile: --format %q is not table or json", o.Format)
	}
	if !o.Since.IsZero() && !o.Until.IsZero() && !o.Until.After(o.Since) {
		return errors.New("reconcile: --until must be after --since")
	}
	return nil
}

// RunOptions are the flags of `binlog-relay run` (the command itself is
// app.App.Run).
type RunOptions struct {
	// AcceptGap: see app.App.AcceptGap.
	AcceptGap bool
}

// Flags registers the options on fs.
func (o *RunOptions) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.AcceptGap, "accept-gap", false, "when the saved position was purged or Redis lost the checkpoint, start at the current position even for tables without a status column, whose rows in the gap are then lost (docs/operating.md, Gaps)")
}

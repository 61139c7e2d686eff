package app

// The flags of `binlog-relay run`; those of the one-shot commands are
// internal/command's. cmd/binlog-relay registers them.

import (
	"flag"
)

// RunOptions are the flags of `binlog-relay run`.
type RunOptions struct {
	// AcceptGap: see App.AcceptGap.
	AcceptGap bool
}

// Flags registers the options on fs.
func (o *RunOptions) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.AcceptGap, "accept-gap", false, "when the saved position was purged or Redis lost the checkpoint, start at the current position even for tables without a status column, whose rows in the gap are then lost (docs/operating.md, Gaps)")
}

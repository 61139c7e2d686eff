package replica

// The `status` command's lines about the source replica and the primary.

import (
	"context"
	"fmt"
	"io"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// PrintStatus prints the source replica's threads and whether the
// checkpoint cp (haveCP: one is saved) has everything the primary has
// (`status`). asked is whether it read the primary (it needs the source's
// flavor to), err the primary's error then.
func PrintStatus(ctx context.Context, w io.Writer, s Servers, cp checkpoint.Checkpoint, haveCP bool) (asked bool, err error) {
	st, err := ReadState(ctx, s.Source(), s.SourceAddr())
	switch {
	case err != nil:
		fmt.Fprintf(w, "replica      %v\n", err)
	case st.IsReplica:
		behind := "unknown (NULL)"
		if st.SecondsBehind != nil {
			behind = fmt.Sprintf("%ds", *st.SecondsBehind)
		}
		fmt.Fprintf(w, "replica      %s replicating from %s: %s; Seconds_Behind_Master %s\n", st.Addr, st.Master, st.Threads(), behind)
		if !st.Running() {
			fmt.Fprintf(w, "             fix: %s\n", st.Fix())
		}
	default:
		fmt.Fprintf(w, "replica      %s is not a replica (the relay reads a primary)\n", st.Addr)
	}
	flavor, err := s.Flavor(ctx)
	if err != nil {
		return false, nil
	}
	primary := s.PrimaryAddr()
	pos, err := PrimaryPosition(ctx, s.Primary(), flavor)
	switch {
	case err != nil:
		fmt.Fprintf(w, "primary      %s: %v\n", primary, err)
		return true, err
	case pos == "":
		fmt.Fprintf(w, "primary      %s has no GTID position: the delay behind it is not measured\n", primary)
	case !haveCP || cp.GTIDSet == "":
		fmt.Fprintf(w, "primary      %s at %s\n", primary, pos)
	default:
		ok, err := binlog.ContainsGTID(flavor, cp.GTIDSet, pos)
		switch {
		case err != nil:
			fmt.Fprintf(w, "primary      %s at %s (cannot compare with the checkpoint: %v)\n", primary, pos, err)
		case ok:
			fmt.Fprintf(w, "primary      %s at %s: the checkpoint has all of it\n", primary, pos)
		default:
			fmt.Fprintf(w, "primary      %s at %s: the checkpoint is behind it (the relay or its replica has not caught up)\n", primary, pos)
		}
	}
	return true, nil
}

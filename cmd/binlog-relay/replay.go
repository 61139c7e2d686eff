package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/replay"
)

// replayExitCodes: replay's 3 (exitIncomplete, reconcile.go) means the run
// stopped before the end of its range, its progress saved for --resume.
const replayExitCodes = `
exit codes: 0 every row replayed, 1 rows failed to publish (listed) or a server failed at start,
            2 usage, config or a range that cannot be replayed (nothing matches, no status column, no archive table),
            3 interrupted (SIGINT/SIGTERM) or a server failed mid-way: progress saved, --resume continues
`

// replayCmd runs `binlog-relay replay` and turns its outcome into the exit
// code.
func replayCmd(ctx context.Context, a *app.App, o *options, stdout, stderr io.Writer) int {
	sum, err := command.Replay(ctx, a.Env(), o.replay, stdout, stderr)
	var ue *replay.UsageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "binlog-relay: replay:", err)
		return exitUsage
	case err != nil && sum == nil:
		fmt.Fprintln(stderr, "binlog-relay: replay:", err)
		return exitRuntime
	case err != nil && sum.Interrupted:
		fmt.Fprintln(stderr, "binlog-relay: replay interrupted; continue with --resume")
		return exitIncomplete
	case err != nil:
		fmt.Fprintln(stderr, "binlog-relay: replay could not finish (progress saved; continue with --resume):", err)
		return exitIncomplete
	case sum.Failed > 0:
		return exitRuntime
	}
	return exitOK
}

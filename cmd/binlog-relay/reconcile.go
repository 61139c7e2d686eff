package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/command"
)

// reconcile's exit codes differ from the other commands': finding a
// difference is its answer, not a failure (README "Exit codes").
const (
	exitDifferences = 1 // the run finished and found differences
	exitIncomplete  = 3 // a server failed: the run could not finish
)

const reconcileExitCodes = `
exit codes: 0 no difference, 1 differences found, 2 usage or config error, 3 the run could not finish (a server failed)
`

// reconcileCmd runs `binlog-relay reconcile` and turns its outcome into
// the exit code.
func reconcileCmd(ctx context.Context, a *app.App, o *options, stdout, stderr io.Writer) int {
	rep, err := command.Reconcile(ctx, a.Env(), o.reconcile, stdout)
	switch {
	case err != nil && rep == nil:
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return exitUsage // a --table the config does not have, refused before anything was read
	case err != nil:
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "binlog-relay: reconcile could not finish:", err)
		}
		return exitIncomplete
	case rep.Differences > 0:
		return exitDifferences
	}
	return exitOK
}

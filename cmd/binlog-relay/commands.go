package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
)

// An appCommand runs on an open App and returns the exit code.
type appCommand func(ctx context.Context, a *app.App, o *options, stdout, stderr io.Writer) int

// appCommands are the commands that need the servers, by name (lint and
// version need none; help is usage.go's).
var appCommands = map[string]appCommand{
	"run":       runCmd,
	"check":     checkCmd,
	"status":    withTables(statusCmd),
	"sweep":     withTables(sweepCmd),
	"requeue":   withTables(requeueCmd),
	"reconcile": withTables(reconcileCmd), // reconcile.go
	"replay":    withTables(replayCmd),    // replay.go
}

// withTables reads which tables the pattern entries under tables: match
// before cmd runs over them (run and check read them themselves, as part
// of the start-up checks).
func withTables(cmd appCommand) appCommand {
	return func(ctx context.Context, a *app.App, o *options, stdout, stderr io.Writer) int {
		if err := a.ResolveTables(ctx); err != nil {
			fmt.Fprintln(stderr, "binlog-relay: tables:", err)
			return exitRuntime
		}
		return cmd(ctx, a, o, stdout, stderr)
	}
}

// runCmd streams until SIGTERM/SIGINT; a stop by signal is not a failure.
func runCmd(ctx context.Context, a *app.App, _ *options, _, _ io.Writer) int {
	a.Log.Info("binlog-relay starting", zap.String("version", a.Build.Version), zap.String("commit", a.Build.Commit), zap.String("name", a.Cfg.Name))
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		a.Log.Error("binlog-relay stopped", zap.Error(err))
		return exitRuntime
	}
	return exitOK
}

// checkCmd prints each problem the start-up checks find; any error fails.
func checkCmd(ctx context.Context, a *app.App, _ *options, stdout, _ io.Writer) int {
	problems := a.Check(ctx)
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	if preflight.HasErrors(problems) {
		return exitRuntime
	}
	fmt.Fprintln(stdout, "OK: source, primary, broker, redis and tables are ready")
	return exitOK
}

// statusCmd prints what status reads; a server it needs that did not
// answer (Redis, the source, the primary) fails it, each named on a line
// of its own.
func statusCmd(ctx context.Context, a *app.App, _ *options, stdout, stderr io.Writer) int {
	if err := command.Status(ctx, a.Env(), stdout); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "binlog-relay: status:", line)
		}
		return exitRuntime
	}
	return exitOK
}

// sweepCmd runs the fallback sweeper alone until SIGTERM/SIGINT.
func sweepCmd(ctx context.Context, a *app.App, _ *options, _, _ io.Writer) int {
	a.Log.Info("binlog-relay sweeper starting", zap.String("version", version), zap.String("name", a.Cfg.Name))
	if err := command.Sweep(ctx, a.Env()); err != nil && !errors.Is(err, context.Canceled) {
		a.Log.Error("binlog-relay sweeper stopped", zap.Error(err))
		return exitRuntime
	}
	return exitOK
}

func requeueCmd(ctx context.Context, a *app.App, o *options, stdout, stderr io.Writer) int {
	if err := command.Requeue(ctx, a.Env(), o.requeue, stdout); err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return exitRuntime
	}
	return exitOK
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
)

// initCmd writes a config from the tables on the source: exit 0 when it
// is written and lint passes, 2 when init refuses (a table it cannot map
// or that is not there, --out exists, lint fails), 1 when a server did
// not answer.
func initCmd(o *options, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := command.Init(ctx, o.init, os.LookupEnv, lintYAML, stdout, stderr)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "binlog-relay:", err)
	if _, ok := errors.AsType[*command.InitRefusedError](err); ok {
		return exitUsage
	}
	return exitRuntime
}

// lintYAML is `binlog-relay lint` on a config's text.
func lintYAML(raw []byte) ([]preflight.Problem, error) {
	cfg, absent, err := config.ParseWith(raw, os.LookupEnv, config.LoadOptions{SkipAbsentFiles: true})
	if err != nil {
		return nil, err
	}
	return preflight.Lint(cfg, app.ConfigChecks(), absent...), nil
}

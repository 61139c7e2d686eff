package main

import (
	"fmt"
	"io"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
)

// lint validates a config without connecting to anything: what check does
// minus the servers. Exit 0 when it would start, 2 with each problem named.
func lint(cfgPath string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return exitUsage
	}
	problems := preflight.Lint(cfg, app.ConfigChecks())
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	if preflight.HasErrors(problems) {
		return exitUsage
	}
	fmt.Fprintf(stdout, "OK: %s is valid (%d tables); servers not contacted (run check for that)\n", cfgPath, len(cfg.Tables))
	return exitOK
}

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
// A password or TLS file that exists only where the relay is deployed is
// not checked, and said so.
func lint(cfgPath string, stdout, stderr io.Writer) int {
	cfg, absent, err := config.LoadWith(cfgPath, config.LoadOptions{SkipAbsentFiles: true})
	if err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return exitUsage
	}
	problems := preflight.Lint(cfg, app.ConfigChecks(), absent...)
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	if preflight.HasErrors(problems) {
		return exitUsage
	}
	patterns := 0
	for i, t := range cfg.Tables {
		if t.IsPattern() {
			patterns++
			fmt.Fprintf(stdout, "Info tables[%d] %s: a pattern; check lists the tables it matches on the source (none is only a warning: tables created later are read as they appear)\n", i, t.FullName())
		}
	}
	if patterns > 0 {
		fmt.Fprintf(stdout, "OK: %s is valid (%d tables, %d of them patterns); servers not contacted (run check for that)\n", cfgPath, len(cfg.Tables), patterns)
		return exitOK
	}
	fmt.Fprintf(stdout, "OK: %s is valid (%d tables); servers not contacted (run check for that)\n", cfgPath, len(cfg.Tables))
	return exitOK
}

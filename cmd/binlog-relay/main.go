// Command binlog-relay tails a MySQL/MariaDB replica's binlog and publishes
// outbox rows to RabbitMQ. See README.md.
//
// It only reads the command line and dispatches: main.go parses it and opens
// the App, flags.go holds each command's flags, commands.go, init.go,
// lint.go, reconcile.go and replay.go turn a command's outcome into its
// exit code, usage.go answers help. The commands themselves are internal/app's.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/ops"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `binlog-relay: publish outbox rows from the binlog to RabbitMQ

usage:
  binlog-relay init   --source DSN --primary DSN --table schema.table [--broker URL] [--redis ADDR]
         [--out relay.yaml]                 write a config from the table itself (a preset, or a mapping),
                                            saying what it could not decide; exit 2 on a table it cannot map
  binlog-relay run    --config relay.yaml   stream until SIGTERM/SIGINT
         [--accept-gap]                     restart at the current position when the saved one is gone,
                                            losing what tables without a status column had in the gap
  binlog-relay check  --config relay.yaml   verify servers, grants and tables
  binlog-relay lint   --config relay.yaml   validate the config without connecting to anything
  binlog-relay status --config relay.yaml   checkpoint, lag, outbox counts, oldest pending, failed, retry ratio
  binlog-relay sweep  --config relay.yaml   run only the fallback sweeper (any number, on any machines)
  binlog-relay requeue --config relay.yaml --failed [--since T] [--id N ...] [--table schema.name] [--error TEXT] [--dry-run]
                                            put FAILED rows back to PENDING, retry count reset
  binlog-relay reconcile --config relay.yaml [--since 24h] [--until T] [--table schema.name ...]
         [--repair] [--format table|json]   compare the outbox with the consumers' inboxes (replicas only);
                                            exit 0 no difference, 1 differences found, 3 could not finish
  binlog-relay replay --config relay.yaml --table schema.name [--since T] [--until T] [--ids A-B]
         [--where field=value ...] [--archive] [--exchange X] [--routing-key K] [--rate N/s]
         [--dry-run] [--resume]             republish SENT (or archived) rows read from the replica, with a
                                            replay header; never changes a row; exit 3 interrupted (--resume)
  binlog-relay version
  binlog-relay help [COMMAND]               this text, or one command's flags (also -h, --help, COMMAND --help)

exit codes: 0 ok, 1 runtime failure, 2 usage or config error;
            reconcile: 1 differences found, 3 the run could not finish
            replay: 1 rows failed to publish, 3 interrupted or a server failed (--resume continues)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if code, done := helpOrUnknown(args, stdout, stderr); done {
		return code
	}
	cmd, rest := args[0], args[1:]
	if cmd == "version" {
		v, c := versionInfo()
		fmt.Fprintf(stdout, "binlog-relay %s (commit %s)\n", v, c)
		return exitOK
	}
	o, ok := parseFlags(cmd, rest, stderr)
	if !ok {
		return exitUsage
	}
	switch cmd {
	case "lint":
		return lint(o.config, stdout, stderr)
	case "init":
		return initCmd(o, stdout, stderr)
	}
	return runOnApp(appCommands[cmd], o, stdout, stderr)
}

// runOnApp loads the config, opens the App and runs cmd on it until it
// returns or SIGTERM/SIGINT cancels it.
func runOnApp(cmd appCommand, o *options, stdout, stderr io.Writer) int {
	if cmd == nil { // helpOrUnknown let through a command without one
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cfg, err := config.Load(o.config)
	if err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return exitUsage
	}
	log, err := ops.NewLogger(cfg.Log)
	if err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return exitUsage
	}
	defer func() { _ = log.Sync() }()
	a, err := app.Open(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return exitUsage
	}
	defer a.Close()
	a.AcceptGap = o.run.AcceptGap
	v, c := versionInfo() // what `binlog-relay version` prints
	a.Build = ops.BuildInfo{Version: v, Commit: c}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cmd(ctx, a, o, stdout, stderr)
}

// Command binlog-relay tails a MySQL/MariaDB replica's binlog and publishes
// outbox rows to RabbitMQ. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `binlog-relay: publish outbox rows from the binlog to RabbitMQ

usage:
  binlog-relay run    --config relay.yaml   stream until SIGTERM/SIGINT
         [--accept-gap]                     restart at the current position when the saved one is gone,
                                            losing what tables without a status column had in the gap
  binlog-relay check  --config relay.yaml   verify servers, grants and tables
  binlog-relay lint   --config relay.yaml   validate the config without connecting to anything
  binlog-relay status --config relay.yaml   checkpoint, lag, outbox counts, oldest pending, failed, retry ratio
  binlog-relay sweep  --config relay.yaml   run only the fallback sweeper (any number, on any machines)
  binlog-relay requeue --config relay.yaml --failed [--since T] [--id N ...] [--table schema.name]
                                            put FAILED rows back to PENDING, retry count reset
  binlog-relay reconcile --config relay.yaml [--since 24h] [--until T] [--table schema.name ...]
         [--repair] [--format table|json]   compare the outbox with the consumers' inboxes (replicas only);
                                            exit 0 no difference, 1 differences found, 3 could not finish
  binlog-relay version
  binlog-relay help [COMMAND]               this text, or one command's flags (also -h, --help, COMMAND --help)

exit codes: 0 ok, 1 runtime failure, 2 usage or config error;
            reconcile: 1 differences found, 3 the run could not finish
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if code, done := helpOrUnknown(args, stdout, stderr); done {
		return code
	}
	cmd, rest := args[0], args[1:]
	if cmd == "version" {
		v, c := versionInfo()
		fmt.Fprintf(stdout, "binlog-relay %s (commit %s)\n", v, c)
		return 0
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "relay.yaml", "path to the YAML config")
	var requeue app.RequeueOptions
	var runOpts app.RunOptions
	var recon app.ReconcileOptions
	if cmd == "run" {
		runOpts.Flags(fs)
	}
	if cmd == "requeue" {
		requeue.Flags(fs)
	}
	if cmd == "reconcile" {
		recon.Flags(fs)
	}
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	if cmd == "lint" {
		return lint(*cfgPath, stdout, stderr)
	}
	if cmd == "requeue" {
		if err := requeue.Validate(); err != nil {
			fmt.Fprintln(stderr, "binlog-relay:", err)
			return 2
		}
	}
	if cmd == "reconcile" {
		if err := recon.Validate(); err != nil {
			fmt.Fprintln(stderr, "binlog-relay:", err)
			return 2
		}
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return 2
	}
	log, err := app.NewLogger(cfg.Log)
	if err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	a, err := app.Open(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return 2
	}
	defer a.Close()
	a.AcceptGap = runOpts.AcceptGap
	v, c := versionInfo() // what `binlog-relay version` prints
	a.Build = app.BuildInfo{Version: v, Commit: c}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "run":
		log.Info("binlog-relay starting", zap.String("version", v), zap.String("commit", c), zap.String("name", cfg.Name))
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("binlog-relay stopped", zap.Error(err))
			return 1
		}
		return 0
	case "check":
		problems := a.Check(ctx)
		for _, p := range problems {
			fmt.Fprintln(stdout, p)
		}
		if app.HasErrors(problems) {
			return 1
		}
		fmt.Fprintln(stdout, "OK: source, primary, broker, redis and tables are ready")
		return 0
	case "status":
		if err := a.Status(ctx, stdout); err != nil {
			fmt.Fprintln(stderr, "binlog-relay:", err)
			return 1
		}
		return 0
	case "sweep":
		log.Info("binlog-relay sweeper starting", zap.String("version", version), zap.String("name", cfg.Name))
		if err := a.Sweep(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("binlog-relay sweeper stopped", zap.Error(err))
			return 1
		}
		return 0
	case "requeue":
		if err := a.Requeue(ctx, requeue, stdout); err != nil {
			fmt.Fprintln(stderr, "binlog-relay:", err)
			return 1
		}
		return 0
	case "reconcile":
		return reconcileCmd(ctx, a, recon, stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
}

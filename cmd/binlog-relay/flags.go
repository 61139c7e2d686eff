package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/binlog-relay/binlog-relay/internal/command"
)

// options are one command's parsed flags.
type options struct {
	config    string
	run       command.RunOptions
	requeue   command.RequeueOptions
	reconcile command.ReconcileOptions
	replay    command.ReplayOptions
	init      command.InitOptions
}

// newFlagSet registers cmd's flags, bound to o. `help CMD` prints the same
// set (usage.go).
func newFlagSet(cmd string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	if cmd == "init" { // it writes a config, and reads none
		o.init.Flags(fs)
		return fs
	}
	fs.StringVar(&o.config, "config", "relay.yaml", "path to the YAML config")
	switch cmd {
	case "run":
		o.run.Flags(fs)
	case "requeue":
		o.requeue.Flags(fs)
	case "reconcile":
		o.reconcile.Flags(fs)
	case "replay":
		o.replay.Flags(fs)
	}
	return fs
}

// parseFlags parses and validates cmd's flags before anything connects; ok
// is false after a usage error, reported on stderr.
func parseFlags(cmd string, args []string, stderr io.Writer) (o *options, ok bool) {
	o = &options{}
	fs := newFlagSet(cmd, o)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, false
	}
	var err error
	switch cmd {
	case "requeue":
		err = o.requeue.Validate()
	case "reconcile":
		err = o.reconcile.Validate()
	case "replay":
		err = o.replay.Validate()
	case "init":
		err = o.init.Validate()
	}
	if err != nil {
		fmt.Fprintln(stderr, "binlog-relay:", err)
		return nil, false
	}
	return o, true
}

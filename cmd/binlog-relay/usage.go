package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Exit codes (README "Exit codes").
const (
	exitOK      = 0 // done, or help printed
	exitRuntime = 1 // a server, the broker or Redis failed while working
	exitUsage   = 2 // bad command line or config: nothing was started
)

var commands = []string{"init", "run", "check", "lint", "status", "sweep", "requeue", "reconcile", "replay", "version", "help"}

func isHelpFlag(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// helpOrUnknown answers help requests and unknown commands before anything
// reads a config: help, -h, --help, help CMD and CMD --help print usage on
// stdout and exit 0; no command or an unknown one prints usage on stderr and
// exits 2. done is false when the command should run.
func helpOrUnknown(args []string, stdout, stderr io.Writer) (code int, done bool) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage, true
	}
	cmd, rest := args[0], args[1:]
	switch {
	case isHelpFlag(cmd):
		fmt.Fprint(stdout, usage)
		return exitOK, true
	case cmd == "help":
		if len(rest) == 0 {
			fmt.Fprint(stdout, usage)
			return exitOK, true
		}
		if !slices.Contains(commands, rest[0]) {
			fmt.Fprintf(stderr, "binlog-relay: unknown command %q\n\n%s", rest[0], usage)
			return exitUsage, true
		}
		commandUsage(stdout, rest[0])
		return exitOK, true
	case !slices.Contains(commands, cmd):
		fmt.Fprintf(stderr, "binlog-relay: unknown command %q\n\n%s", cmd, usage)
		return exitUsage, true
	}
	for _, a := range rest {
		if a == "--" {
			break
		}
		if isHelpFlag(a) {
			commandUsage(stdout, cmd)
			return exitOK, true
		}
	}
	return 0, false
}

// commandUsage prints the usage lines of one command and its flags.
func commandUsage(w io.Writer, cmd string) {
	lines := strings.Split(usage, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "  binlog-relay "+cmd+" ") && l != "  binlog-relay "+cmd {
			continue
		}
		fmt.Fprintln(w, "usage:")
		fmt.Fprintln(w, l)
		// Continuation lines are indented past the command.
		for _, next := range lines[i+1:] {
			if !strings.HasPrefix(next, "        ") {
				break
			}
			fmt.Fprintln(w, next)
		}
	}
	if cmd == "version" || cmd == "help" {
		return
	}
	fs := newFlagSet(cmd, &options{})
	fmt.Fprintln(w, "\nflags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	if cmd == "reconcile" {
		fmt.Fprint(w, reconcileExitCodes)
		return
	}
	if cmd == "replay" {
		fmt.Fprint(w, replayExitCodes)
		return
	}
	if cmd == "init" {
		fmt.Fprint(w, initExitCodes)
		return
	}
	fmt.Fprint(w, exitCodes)
}

const initExitCodes = `
exit codes: 0 written and lint passed, 1 the source did not answer, 2 usage error, a table it cannot map or
            that is not there, an --out that exists, or a config lint refuses
`

const exitCodes = `
exit codes: 0 ok, 1 runtime failure (a server, the broker or Redis), 2 usage or config error
`

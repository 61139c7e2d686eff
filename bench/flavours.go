package main

// -flavours runs the bench once per flavour of the stack and prints the
// figures side by side: one table per step, a column per flavour, so that a
// change that helps one flavour and hurts another shows in one run. Each
// flavour runs in a child process of this binary with that flavour's
// addresses (scripts/stack.sh env), one after the other: the servers of
// all flavours share the machine's cores, and two runs at once would
// measure each other.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// flavourName maps the short names make bench takes to the stack's.
func flavourName(s string) string {
	switch s {
	case "mysql":
		return "mysql-9.7"
	case "mariadb":
		return "mariadb-10.11"
	}
	return s
}

// flavourRun is one child's figures, in the order printed.
type flavourRun struct {
	name    string
	header  []string
	names   []string
	values  map[string]string
	units   map[string]string
	failure error
}

// runFlavours runs the bench (args, without -flavours) per flavour and
// prints the side-by-side tables; it returns an error when a child failed.
func runFlavours(ctx context.Context, flavours []string, args []string, out io.Writer) error {
	var runs []*flavourRun
	for _, f := range flavours {
		f = flavourName(f)
		progress("== flavour %s", f)
		r := &flavourRun{name: f, values: map[string]string{}, units: map[string]string{}}
		r.failure = runOneFlavour(ctx, r, args)
		runs = append(runs, r)
		if ctx.Err() != nil {
			break
		}
	}
	printFlavours(out, runs)
	var errs []string
	for _, r := range runs {
		if r.failure != nil {
			errs = append(errs, r.name+": "+r.failure.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// runOneFlavour runs this binary on one flavour and reads its figures. The
// child's own report (figures and its tables) goes to a file whose path is
// logged, its progress to stderr.
func runOneFlavour(ctx context.Context, r *flavourRun, args []string) error {
	envOut, err := exec.CommandContext(ctx, testenv.RepoPath("scripts/stack.sh"), "env", r.name).Output()
	if err != nil {
		return fmt.Errorf("scripts/stack.sh env %s: %w", r.name, err)
	}
	env := os.Environ()
	for _, line := range strings.Split(string(envOut), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "export "), "=")
		if !ok {
			continue
		}
		if uq, err := strconv.Unquote(strings.ReplaceAll(v, "'", `"`)); err == nil {
			v = uq
		}
		env = append(env, k+"="+v)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, os.Stderr
	runErr := cmd.Run()
	if f, err := os.CreateTemp("", "bench-"+r.name+"-*.txt"); err == nil {
		_, _ = f.Write(stdout.Bytes())
		_ = f.Close()
		progress("== %s: full report in %s", r.name, f.Name())
	}
	parseFigures(r, stdout.Bytes())
	return runErr
}

// parseFigures reads the `name value unit` lines up to the first blank
// line (the tables follow it), and the # header.
func parseFigures(r *flavourRun, b []byte) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			return
		}
		if strings.HasPrefix(line, "#") {
			r.header = append(r.header, line)
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		if _, seen := r.values[f[0]]; !seen {
			r.names = append(r.names, f[0])
		}
		r.values[f[0]], r.units[f[0]] = f[1], f[2]
	}
}

// stepOf groups a figure by the step that measured it: its name up to the
// first underscore, with the figures of the fixed-rate runs (latency_,
// primary_, replica_, rss_relay_steady) under latency.
func stepOf(name string) string {
	switch {
	case strings.HasPrefix(name, "latency_") || strings.HasPrefix(name, "primary_") || strings.HasPrefix(name, "replica_apply"):
		return "latency"
	case strings.HasPrefix(name, "cpu_"):
		return "cpu"
	}
	step, _, _ := strings.Cut(name, "_")
	return step
}

// printFlavours prints each flavour's header, then one table per step: a
// row per figure, a column per flavour ("-" where a flavour has none).
func printFlavours(w io.Writer, runs []*flavourRun) {
	for _, r := range runs {
		for _, h := range r.header {
			fmt.Fprintln(w, h)
		}
		if r.failure != nil {
			fmt.Fprintf(w, "# %s failed: %v\n", r.name, r.failure)
		}
	}
	var steps []string
	byStep := map[string][]string{}
	for _, r := range runs {
		for _, n := range r.names {
			s := stepOf(n)
			if !slices.Contains(steps, s) {
				steps = append(steps, s)
			}
			if !slices.Contains(byStep[s], n) {
				byStep[s] = append(byStep[s], n)
			}
		}
	}
	for _, s := range steps {
		fmt.Fprintf(w, "\n%s\n", s)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := []string{"figure"}
		for _, r := range runs {
			head = append(head, r.name)
		}
		fmt.Fprintln(tw, strings.Join(append(head, "unit"), "\t")+"\t")
		for _, n := range byStep[s] {
			cells, unit := []string{n}, ""
			for _, r := range runs {
				v, ok := r.values[n]
				if !ok {
					v = "-"
				} else {
					unit = r.units[n]
				}
				cells = append(cells, v)
			}
			fmt.Fprintln(tw, strings.Join(append(cells, unit), "\t")+"\t")
		}
		_ = tw.Flush()
	}
}

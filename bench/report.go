package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report holds the figures in the order they were measured.
type report struct {
	figures []figure
	cpu     []cpuRow
	scale   map[int]map[string]float64 // by table size: drain_relay, drain_poller, p50_<label>, p99_<label>
}

type figure struct {
	name  string
	value float64
	unit  string
}

func (r *report) add(name string, v float64, unit string) {
	r.figures = append(r.figures, figure{name, v, unit})
}

// cpuRow is one step's CPU use by process, per 1,000 messages.
type cpuRow struct {
	title string
	msgs  int
	use   cpuUse
}

// cpuOrder is the column order of the CPU table.
var cpuOrder = []string{"broker", "primary", "replica", "replica2", "relay", "bench"}

// addCPU records a step's CPU use: one figure per process and the total, per
// 1,000 messages, and the share of the machine it kept busy.
func (r *report) addCPU(key, title string, msgs int, u cpuUse) {
	if len(u.by) == 0 {
		return
	}
	r.cpu = append(r.cpu, cpuRow{title, msgs, u})
	for _, name := range cpuOrder {
		if d, ok := u.by[name]; ok {
			r.add("cpu_"+key+"_"+name+"_ms_per_1k_msgs", per1kDur(d, msgs), "ms")
		}
	}
	r.add("cpu_"+key+"_total_ms_per_1k_msgs", per1kDur(u.total(), msgs), "ms")
	r.add("cpu_"+key+"_machine_busy_pct", 100*u.total().Seconds()/u.elapsed.Seconds()/float64(runtime.NumCPU()), "%")
}

func (r *report) get(name string) (float64, bool) {
	for i := len(r.figures) - 1; i >= 0; i-- {
		if r.figures[i].name == name {
			return r.figures[i].value, true
		}
	}
	return 0, false
}

func (r *report) scaleAt(size int) map[string]float64 {
	if r.scale == nil {
		r.scale = map[int]map[string]float64{}
	}
	if r.scale[size] == nil {
		r.scale[size] = map[string]float64{}
	}
	return r.scale[size]
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// print writes one `name value unit` line per figure, then the tables.
func (r *report) print(w io.Writer, o *options) {
	for _, f := range r.figures {
		fmt.Fprintf(w, "%s %s %s\n", f.name, num(f.value), f.unit)
	}
	cell := func(name, suffix string) string {
		if v, ok := r.get(name); ok {
			return num(v) + suffix
		}
		return "-"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }

	fmt.Fprintf(w, "\nbacklog drain: %d PENDING rows, %d SENT rows in the table\n", o.backlog, o.scaleSizes[0])
	row("", "msg/s", "of broker", "primary stmts/1k", "primary cpu ms/1k", "first delivery ms")
	row("broker limit", cell("broker_limit_msgs_per_s", ""), "100%", "", "", "")
	row("binlog-relay", cell("drain_relay_msgs_per_s", ""), cell("drain_relay_vs_broker_pct", "%"), cell("drain_relay_primary_stmts_per_1k_msgs", ""),
		cell("drain_relay_primary_cpu_ms_per_1k_msgs", ""), cell("drain_relay_first_delivery_ms", ""))
	if _, ok := r.get("drain_relay_unmarked_msgs_per_s"); ok {
		row("without SENT marks", cell("drain_relay_unmarked_msgs_per_s", ""), cell("drain_relay_unmarked_vs_broker_pct", "%"), "0", "", "")
	}
	row("poller", cell("drain_poller_msgs_per_s", ""), cell("drain_poller_vs_broker_pct", "%"), cell("drain_poller_primary_stmts_per_1k_msgs", ""),
		cell("drain_poller_primary_cpu_ms_per_1k_msgs", ""), cell("drain_poller_first_delivery_ms", ""))
	_ = tw.Flush()

	if len(r.cpu) > 0 {
		fmt.Fprintf(w, "\nCPU ms per 1,000 messages, by process (%d cores; bench = consumer, and the poller in its drain)\n", runtime.NumCPU())
		row(append(append([]string{""}, cpuOrder...), "total", "machine busy")...)
		for _, c := range r.cpu {
			cells := []string{c.title}
			for _, name := range cpuOrder {
				if d, ok := c.use.by[name]; ok {
					cells = append(cells, num(per1kDur(d, c.msgs)))
				} else {
					cells = append(cells, "-")
				}
			}
			cells = append(cells, num(per1kDur(c.use.total(), c.msgs)),
				num(100*c.use.total().Seconds()/c.use.elapsed.Seconds()/float64(runtime.NumCPU()))+"%")
			row(cells...)
		}
		_ = tw.Flush()
	}

	fmt.Fprintf(w, "\nfixed rate: %d rows/s for %s (commit to delivery), then idle %s\n", o.rate, o.duration, o.idle)
	row("", "p50 ms", "p99 ms", "max ms", "primary stmts/1k", "select/1k", "update/1k", "primary cpu ms/1k", "idle stmts/min")
	labels := []string{"relay"}
	for _, iv := range o.pollIntervals {
		labels = append(labels, pollLabel(iv))
	}
	for _, l := range labels {
		name := l
		if l == "relay" {
			name = "binlog-relay"
		}
		row(name, cell("latency_"+l+"_p50_ms", ""), cell("latency_"+l+"_p99_ms", ""), cell("latency_"+l+"_max_ms", ""),
			cell("primary_"+l+"_stmts_per_1k_msgs", ""), cell("primary_"+l+"_selects_per_1k_msgs", ""), cell("primary_"+l+"_updates_per_1k_msgs", ""),
			cell("primary_"+l+"_cpu_ms_per_1k_msgs", ""), cell("primary_"+l+"_idle_stmts_per_min", ""))
	}
	_ = tw.Flush()
	if _, ok := r.get("replica_apply_delay_p50_ms"); ok {
		fmt.Fprintf(w, "(of binlog-relay's latency, the replica's apply delay: p50 %s ms, p99 %s ms)\n",
			cell("replica_apply_delay_p50_ms", ""), cell("replica_apply_delay_p99_ms", ""))
	}

	if len(r.scale) > 0 {
		sizes := make([]int, 0, len(r.scale))
		for s := range r.scale {
			sizes = append(sizes, s)
		}
		slices.Sort(sizes)
		fmt.Fprintf(w, "\nscale: SENT rows already in the table (fixed-rate runs: %s at the first size, %s at the others)\n", o.duration, o.scaleDuration)
		head := []string{""}
		for _, s := range sizes {
			head = append(head, sizeLabel(s))
		}
		row(head...)
		pl := pollLabel(o.scalePoll)
		for _, k := range []struct{ key, name string }{
			{"drain_relay", "drain binlog-relay msg/s"}, {"drain_poller", "drain poller msg/s"},
			{"p50_relay", "p50 binlog-relay ms"}, {"p99_relay", "p99 binlog-relay ms"},
			{"p50_" + pl, "p50 " + strings.ReplaceAll(pl, "_", " ") + " ms"}, {"p99_" + pl, "p99 " + strings.ReplaceAll(pl, "_", " ") + " ms"},
		} {
			cells := []string{k.name}
			for _, s := range sizes {
				if v, ok := r.scale[s][k.key]; ok {
					cells = append(cells, num(v))
				} else {
					cells = append(cells, "-")
				}
			}
			row(cells...)
		}
		_ = tw.Flush()
	}

	fmt.Fprintln(w, "\nmemory: binlog-relay peak RSS")
	row("steady (fixed-rate run)", cell("rss_relay_steady_peak_mb", " MB"))
	row("backlog drain", cell("rss_relay_drain_peak_mb", " MB"))
	row(fmt.Sprintf("one %d-row transaction", o.bigTx), cell("rss_relay_bigtx_peak_mb", " MB"))
	_ = tw.Flush()

	fmt.Fprintln(w, "\ntargets (issue 7)")
	for _, t := range r.targets(o) {
		row(t[0], t[1], t[2])
	}
	_ = tw.Flush()
}

// targets checks the targets against the figures: what, measured,
// verdict.
func (r *report) targets(o *options) [][3]string {
	var out [][3]string
	check := func(what string, ok bool, measured string) {
		v := "FAIL"
		if ok {
			v = "ok"
		}
		out = append(out, [3]string{what, measured, v})
	}
	if pct, ok := r.get("drain_relay_vs_broker_pct"); ok {
		check("drain >= 90% of the broker limit", pct >= 90, num(pct)+"%")
	}
	rr, ok1 := r.get("drain_relay_msgs_per_s")
	pr, ok2 := r.get("drain_poller_msgs_per_s")
	if ok1 && ok2 {
		check("drain above the poller's", rr > pr, num(rr)+" vs "+num(pr)+" msg/s")
	}
	if p99, ok := r.get("latency_relay_p99_ms"); ok {
		check(fmt.Sprintf("p99 <= 50 ms at %d rows/s", o.rate), p99 <= 50, num(p99)+" ms")
	}
	// Statement counts: the primary's counters, as the issue asks; when
	// another client used the primary meanwhile they overstate, and the
	// verdict goes by the proxy's count of the relay's own statements.
	stmts := func(counters, wire string) (float64, string, bool) {
		c, ok := r.get(counters)
		if !ok {
			return 0, "", false
		}
		w, wok := r.get(wire)
		if !wok || w == c {
			return c, num(c), true
		}
		return w, num(c) + " (proxy " + num(w) + ")", true
	}
	if v, shown, ok := stmts("primary_relay_idle_stmts_per_min", "primary_relay_wire_idle_stmts_per_min"); ok {
		check("0 primary statements when idle", v == 0, shown+"/min")
	}
	if v, shown, ok := stmts("primary_relay_stmts_per_1k_msgs", "primary_relay_wire_stmts_per_1k_msgs"); ok {
		check("<= 10 primary statements per 1,000 messages", v <= 10, shown)
	}
	if m, ok := r.get("rss_relay_steady_peak_mb"); ok {
		check("peak RSS <= 64 MB steady", m <= 64, num(m)+" MB")
	}
	if m, ok := r.get("rss_relay_bigtx_peak_mb"); ok {
		check(fmt.Sprintf("peak RSS <= 256 MB for %d rows in one tx", o.bigTx), m <= 256, num(m)+" MB")
	}
	rc := "reconcile_" + sizeLabel(o.reconcileRows) + "_rows_"
	if s, ok := r.get(rc + "seconds"); ok {
		check(fmt.Sprintf("reconcile %d rows under %d s", o.reconcileRows, reconcileSecondsTarget), s < reconcileSecondsTarget, num(s)+" s")
	}
	if m, ok := r.get(rc + "peak_rss_mb"); ok {
		check(fmt.Sprintf("reconcile peak RSS under %d MB", reconcileRSSTarget), m < reconcileRSSTarget, num(m)+" MB")
	}
	if s, ok := r.get("bench_wall_seconds"); ok {
		check("make bench under 15 minutes", s < 15*60, time.Duration(s*float64(time.Second)).Round(time.Second).String())
	}
	return out
}

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
	stack   stackInfo // empty when the run ended before it reached the servers
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

// print writes the header (what the run ran on, as # comments), one `name
// value unit` line per figure, then the tables.
func (r *report) print(w io.Writer, o *options) {
	if r.stack.flavor != "" {
		for _, l := range r.stack.header() {
			fmt.Fprintln(w, l)
		}
	}
	for _, f := range r.figures {
		fmt.Fprintf(w, "%s %s %s\n", f.name, num(f.value), f.unit)
	}
	t := &tables{r: r, o: o, w: w, tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)}
	t.drain()
	t.cpu()
	t.latency()
	t.scale()
	t.memory()
	t.lanes()
	t.targets()
}

// tables writes the report's tables, one method a table. A title goes
// straight to w, rows through tw, which each table flushes before the next
// title so that the columns line up within a table only.
type tables struct {
	r  *report
	o  *options
	w  io.Writer
	tw *tabwriter.Writer
}

// cell is a figure with its suffix, or "-" when it was not measured.
func (t *tables) cell(name, suffix string) string {
	if v, ok := t.r.get(name); ok {
		return num(v) + suffix
	}
	return "-"
}

func (t *tables) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")+"\t") }

func (t *tables) drain() {
	fmt.Fprintf(t.w, "\nbacklog drain: %d PENDING rows, %d SENT rows in the table\n", t.o.backlog, t.o.scaleSizes[0])
	t.row("", "msg/s", "of broker", "primary stmts/1k", "primary cpu ms/1k", "first delivery ms")
	t.row("broker limit", t.cell("broker_limit_msgs_per_s", ""), "100%", "", "", "")
	t.row("binlog-relay", t.cell("drain_relay_msgs_per_s", ""), t.cell("drain_relay_vs_broker_pct", "%"), t.cell("drain_relay_primary_stmts_per_1k_msgs", ""),
		t.cell("drain_relay_primary_cpu_ms_per_1k_msgs", ""), t.cell("drain_relay_first_delivery_ms", ""))
	if _, ok := t.r.get("drain_relay_quorum_msgs_per_s"); ok {
		t.row("into a quorum queue", t.cell("drain_relay_quorum_msgs_per_s", ""), "", t.cell("drain_relay_quorum_primary_stmts_per_1k_msgs", ""),
			t.cell("drain_relay_quorum_primary_cpu_ms_per_1k_msgs", ""), t.cell("drain_relay_quorum_first_delivery_ms", ""))
	}
	if _, ok := t.r.get("drain_relay_unmarked_msgs_per_s"); ok {
		t.row("without SENT marks", t.cell("drain_relay_unmarked_msgs_per_s", ""), t.cell("drain_relay_unmarked_vs_broker_pct", "%"), "0", "", "")
	}
	t.row("poller", t.cell("drain_poller_msgs_per_s", ""), t.cell("drain_poller_vs_broker_pct", "%"), t.cell("drain_poller_primary_stmts_per_1k_msgs", ""),
		t.cell("drain_poller_primary_cpu_ms_per_1k_msgs", ""), t.cell("drain_poller_first_delivery_ms", ""))
	_ = t.tw.Flush()
	if _, ok := t.r.get("drain_relay_quorum_vs_classic_ratio"); ok {
		fmt.Fprintf(t.w, "(binlog-relay into a quorum queue over into the classic one: %sx; the broker limit is the classic queue's)\n",
			t.cell("drain_relay_quorum_vs_classic_ratio", ""))
	}
}

func (t *tables) cpu() {
	if len(t.r.cpu) == 0 {
		return
	}
	fmt.Fprintf(t.w, "\nCPU ms per 1,000 messages, by process (%d cores; bench = consumer, and the poller in its drain)\n", runtime.NumCPU())
	t.row(append(append([]string{""}, cpuOrder...), "total", "machine busy")...)
	for _, c := range t.r.cpu {
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
		t.row(cells...)
	}
	_ = t.tw.Flush()
}

func (t *tables) latency() {
	o := t.o
	fmt.Fprintf(t.w, "\nfixed rate: %d rows/s for %s (commit to delivery), then idle %s\n", o.rate, o.duration, o.idle)
	t.row("", "p50 ms", "p99 ms", "max ms", "primary stmts/1k", "select/1k", "update/1k", "primary cpu ms/1k", "idle stmts/min")
	labels := []string{"relay"}
	for _, iv := range o.pollIntervals {
		labels = append(labels, pollLabel(iv))
	}
	for _, l := range labels {
		name := l
		if l == "relay" {
			name = "binlog-relay"
		}
		t.row(name, t.cell("latency_"+l+"_p50_ms", ""), t.cell("latency_"+l+"_p99_ms", ""), t.cell("latency_"+l+"_max_ms", ""),
			t.cell("primary_"+l+"_stmts_per_1k_msgs", ""), t.cell("primary_"+l+"_selects_per_1k_msgs", ""), t.cell("primary_"+l+"_updates_per_1k_msgs", ""),
			t.cell("primary_"+l+"_cpu_ms_per_1k_msgs", ""), t.cell("primary_"+l+"_idle_stmts_per_min", ""))
	}
	_ = t.tw.Flush()
	if _, ok := t.r.get("replica_apply_delay_p50_ms"); ok {
		fmt.Fprintf(t.w, "(of binlog-relay's latency, the replica's apply delay: p50 %s ms, p99 %s ms)\n",
			t.cell("replica_apply_delay_p50_ms", ""), t.cell("replica_apply_delay_p99_ms", ""))
	}
}

func (t *tables) scale() {
	if len(t.r.scale) == 0 {
		return
	}
	sizes := make([]int, 0, len(t.r.scale))
	for s := range t.r.scale {
		sizes = append(sizes, s)
	}
	slices.Sort(sizes)
	fmt.Fprintf(t.w, "\nscale: SENT rows already in the table (fixed-rate runs: %s at the first size, %s at the others)\n", t.o.duration, t.o.scaleDuration)
	head := []string{""}
	for _, s := range sizes {
		head = append(head, sizeLabel(s))
	}
	t.row(head...)
	pl := pollLabel(t.o.scalePoll)
	for _, k := range []struct{ key, name string }{
		{"drain_relay", "drain binlog-relay msg/s"}, {"drain_poller", "drain poller msg/s"},
		{"p50_relay", "p50 binlog-relay ms"}, {"p99_relay", "p99 binlog-relay ms"},
		{"p50_" + pl, "p50 " + strings.ReplaceAll(pl, "_", " ") + " ms"}, {"p99_" + pl, "p99 " + strings.ReplaceAll(pl, "_", " ") + " ms"},
	} {
		cells := []string{k.name}
		for _, s := range sizes {
			if v, ok := t.r.scale[s][k.key]; ok {
				cells = append(cells, num(v))
			} else {
				cells = append(cells, "-")
			}
		}
		t.row(cells...)
	}
	_ = t.tw.Flush()
}

func (t *tables) memory() {
	fmt.Fprintln(t.w, "\nmemory: binlog-relay peak RSS")
	t.row("steady (fixed-rate run)", t.cell("rss_relay_steady_peak_mb", " MB"))
	t.row("backlog drain", t.cell("rss_relay_drain_peak_mb", " MB"))
	t.row(fmt.Sprintf("one %d-row transaction", t.o.bigTx), t.cell("rss_relay_bigtx_peak_mb", " MB"))
	_ = t.tw.Flush()
}

func (t *tables) lanes() {
	if _, ok := t.r.get("lanes_4_drain_msgs_per_s"); !ok {
		return
	}
	fmt.Fprintf(t.w, "\nordered lanes: %d PENDING rows over %d keys (docs/ordering.md)\n", t.o.lanesBacklog, t.o.lanesKeys)
	t.row("", "msg/s", "relay cpu ms/1k")
	t.row("broker limit, 1 channel", t.cell("broker_limit_1ch_msgs_per_s", ""), "")
	t.row("broker limit, 4 channels", t.cell("broker_limit_4ch_msgs_per_s", ""), "")
	for _, l := range lanesRuns {
		t.row(fmt.Sprintf("%s, %d lane(s)", l.ordering, l.lanes), t.cell(l.label+"_drain_msgs_per_s", ""), t.cell(l.label+"_relay_cpu_ms_per_1k_msgs", ""))
	}
	_ = t.tw.Flush()
}

func (t *tables) targets() {
	fmt.Fprintln(t.w, "\ntargets")
	for _, v := range t.r.targets(t.o) {
		t.row(v[0], v[1], v[2])
	}
	_ = t.tw.Flush()
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
	if pct, ok := r.get("strict_lanes_4_vs_relaxed_pct"); ok {
		check("strict per key on 4 lanes >= 80% of relaxed", pct >= 80, num(pct)+"%")
	}
	if c, ok := r.get("relay_cpu_ms_per_1k_msgs"); ok {
		check("relay CPU <= 25 ms per 1,000 messages (4 lanes)", c <= 25, num(c)+" ms")
	}
	if pct, ok := r.get("tenants_drain_spread_vs_one_pct"); ok {
		check(fmt.Sprintf("drain over %d tables >= 90%% of one table", o.tenants), pct >= 90, num(pct)+"%")
	}
	if v, shown, ok := stmts("tenants_idle_primary_stmts_per_interval", "tenants_idle_primary_wire_stmts_per_interval"); ok {
		check(fmt.Sprintf("0 primary statements when idle at %d tables", o.tenants), v == 0, shown+"/interval")
	}
	if s, ok := r.get("bench_wall_seconds"); ok {
		check("make bench under 15 minutes", s < 15*60, time.Duration(s*float64(time.Second)).Round(time.Second).String())
	}
	return out
}

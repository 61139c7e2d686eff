package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// drainResult is one backlog drain.
type drainResult struct {
	rate      float64       // messages/s from start to the last delivery
	first     time.Duration // start to the first delivery
	load      load          // primary, from start until every row is SENT
	msgs      int
	rss       int64
	relayCPU  time.Duration
	totalTime time.Duration
	cpu       cpuUse // by process of the stack, from start until every row is SENT
}

// drainRelay: the relay saves a checkpoint and stops; the backlog is
// committed; the relay starts again from that checkpoint and drains it from
// the binlog.
func drainRelay(ctx context.Context, e *env) (drainResult, error) {
	var r drainResult
	name := fmt.Sprintf("bench-drain-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	if err := e.checkpointAt(ctx, name, e.outboxRows()); err != nil {
		return r, err
	}
	d, err := startDrain(ctx, e, "dr")
	if err != nil {
		return r, err
	}
	p, err := e.startRelay(ctx, name, true)
	if err != nil {
		return r, err
	}
	defer p.kill()
	if err := d.s.wait(ctx, 10*time.Minute); err != nil {
		return r, err
	}
	if e.relayMarks() {
		if err := e.waitAllSent(ctx, 60*time.Second); err != nil {
			return r, err
		}
	}
	after, err := e.sampleLoad(ctx)
	if err != nil {
		return r, err
	}
	r = d.result(after)
	r.rss, r.relayCPU = p.peakRSS(), p.cpu()
	r.cpu = cpuBetween(d.cpu0, sampleCPU(e.procs))
	if r.relayCPU >= 0 {
		r.cpu.by["relay"] = r.relayCPU
	}
	if err := p.stop(); err != nil {
		return r, err
	}
	if _, dups := d.s.counts(); dups > 0 {
		progress("relay drain: %d duplicates", dups)
	}
	return r, e.reset(ctx)
}

// drainPoller: the backlog is committed, then the poller starts.
func drainPoller(ctx context.Context, e *env) (drainResult, error) {
	var r drainResult
	d, err := startDrain(ctx, e, "dp")
	if err != nil {
		return r, err
	}
	interval := e.o.scalePoll
	if len(e.o.pollIntervals) > 0 {
		interval = e.o.pollIntervals[0]
	}
	p, err := newPoller(e, interval)
	if err != nil {
		return r, err
	}
	p.start()
	waitErr := d.s.wait(ctx, 10*time.Minute)
	if waitErr == nil {
		waitErr = e.waitAllSent(ctx, 60*time.Second)
	}
	cpu := cpuBetween(d.cpu0, sampleCPU(e.procs))
	after, err := e.sampleLoad(ctx)
	if herr := p.halt(); herr != nil && waitErr == nil {
		waitErr = herr
	}
	if waitErr != nil {
		return r, waitErr
	}
	if err != nil {
		return r, err
	}
	r = d.result(after)
	r.cpu = cpu
	progress("  poller: it counted %d statements; the proxy %d; the primary's counters %d", p.stmts.Load(), r.load.wire.questions, r.load.stmts.questions)
	return r, e.reset(ctx)
}

// commitBacklog commits the backlog, -backlog PENDING rows under a new
// prefix made from tag, and waits until the stack is quiet again. It
// returns the prefix.
func commitBacklog(ctx context.Context, e *env, tag string) (string, error) {
	prefix := e.nextPrefix(tag)
	if err := e.insertRows(ctx, e.primary, prefix, e.o.backlog, 1000, "PENDING"); err != nil {
		return "", err
	}
	return prefix, e.quiesce(ctx)
}

// drainClock is what a drain is measured from: the sink expecting the
// backlog, and the primary's load, the stack's CPU and the time just before
// the contender starts.
type drainClock struct {
	s      *sink
	n      int
	before sample
	cpu0   cpuSample
	start  time.Time
}

// startDrain commits the backlog and starts the clock on it.
func startDrain(ctx context.Context, e *env, tag string) (*drainClock, error) {
	prefix, err := commitBacklog(ctx, e, tag)
	if err != nil {
		return nil, err
	}
	d := &drainClock{s: e.consumer.expect(prefix, e.o.backlog, false), n: e.o.backlog}
	if d.before, err = e.sampleLoad(ctx); err != nil {
		return nil, err
	}
	d.cpu0 = sampleCPU(e.procs)
	d.start = time.Now()
	return d, nil
}

// result is the drain's rate, first delivery and load on the primary, from
// the deliveries and the load sampled after the drain.
func (d *drainClock) result(after sample) drainResult {
	first, last := d.s.span()
	return drainResult{rate: float64(d.n) / last.Sub(d.start).Seconds(), first: first.Sub(d.start), load: loadBetween(d.before, after),
		msgs: d.n, totalTime: last.Sub(d.start)}
}

// drainStep is step 2 at the main table size: the relay's drain into the
// classic queue and into a quorum one (quorum.go), and the poller's.
func drainStep(ctx context.Context, e *env, rep *report, size int) error {
	rr, pr, err := drainBoth(ctx, e, rep, size)
	if err != nil {
		return err
	}
	qr, err := drainQuorum(ctx, e)
	if err != nil {
		return fmt.Errorf("relay into a quorum queue: %w", err)
	}
	rep.add("drain_relay_msgs_per_s", rr.rate, "msg/s")
	rep.add("drain_relay_quorum_msgs_per_s", qr.rate, "msg/s")
	rep.add("drain_relay_quorum_vs_classic_ratio", qr.rate/rr.rate, "x")
	rep.add("drain_poller_msgs_per_s", pr.rate, "msg/s")
	if e.brokerRate > 0 {
		rep.add("drain_relay_vs_broker_pct", 100*rr.rate/e.brokerRate, "%")
		rep.add("drain_poller_vs_broker_pct", 100*pr.rate/e.brokerRate, "%")
	}
	rep.add("drain_relay_vs_poller_ratio", rr.rate/pr.rate, "x")
	rep.add("scale_"+sizeLabel(size)+"_drain_relay_msgs_per_s", rr.rate, "msg/s")
	rep.add("scale_"+sizeLabel(size)+"_drain_poller_msgs_per_s", pr.rate, "msg/s")
	rep.add("drain_relay_first_delivery_ms", ms(rr.first), "ms")
	rep.add("drain_relay_quorum_first_delivery_ms", ms(qr.first), "ms")
	rep.add("drain_poller_first_delivery_ms", ms(pr.first), "ms")
	rep.add("drain_relay_primary_stmts_per_1k_msgs", per1k(rr.load.stmts.questions, rr.msgs), "stmt")
	rep.add("drain_relay_quorum_primary_stmts_per_1k_msgs", per1k(qr.load.stmts.questions, qr.msgs), "stmt")
	rep.add("drain_poller_primary_stmts_per_1k_msgs", per1k(pr.load.stmts.questions, pr.msgs), "stmt")
	rep.add("drain_relay_primary_wire_stmts_per_1k_msgs", per1k(rr.load.wire.questions, rr.msgs), "stmt")
	rep.add("drain_poller_primary_wire_stmts_per_1k_msgs", per1k(pr.load.wire.questions, pr.msgs), "stmt")
	if rr.load.cpu >= 0 && qr.load.cpu >= 0 && pr.load.cpu >= 0 && e.primaryPID > 0 {
		rep.add("drain_relay_primary_cpu_ms_per_1k_msgs", per1kDur(rr.load.cpu, rr.msgs), "ms")
		rep.add("drain_relay_quorum_primary_cpu_ms_per_1k_msgs", per1kDur(qr.load.cpu, qr.msgs), "ms")
		rep.add("drain_poller_primary_cpu_ms_per_1k_msgs", per1kDur(pr.load.cpu, pr.msgs), "ms")
	}
	if rr.relayCPU >= 0 {
		rep.add("drain_relay_process_cpu_ms_per_1k_msgs", per1kDur(rr.relayCPU, rr.msgs), "ms")
	}
	rep.add("rss_relay_drain_peak_mb", mb(rr.rss), "MB")
	rep.addCPU("drain_relay", "binlog-relay drain", rr.msgs, rr.cpu)
	rep.addCPU("drain_relay_quorum", "into a quorum queue", qr.msgs, qr.cpu)
	if ur, ok, err := drainUnmarked(ctx, e); err != nil {
		return fmt.Errorf("relay without SENT marks: %w", err)
	} else if ok {
		rep.add("drain_relay_unmarked_msgs_per_s", ur.rate, "msg/s")
		if e.brokerRate > 0 {
			rep.add("drain_relay_unmarked_vs_broker_pct", 100*ur.rate/e.brokerRate, "%")
		}
		rep.addCPU("drain_relay_unmarked", "without SENT marks", ur.msgs, ur.cpu)
	}
	rep.addCPU("drain_poller", "poller drain", pr.msgs, pr.cpu)
	return nil
}

// defaultTable is -relay-table's default; unmarkedTable is the same table
// with the status column taken away, so the relay marks nothing.
const (
	defaultTable  = "{preset: producer-message}"
	unmarkedTable = "{preset: producer-message, columns: {status: ''}}"
)

// drainUnmarked repeats the relay's drain with the SENT marks off (with the
// default table only): not a way to deploy the relay, but the measure of
// what the marks cost the drain on a machine the databases share.
func drainUnmarked(ctx context.Context, e *env) (drainResult, bool, error) {
	if e.o.tableYAML != defaultTable {
		return drainResult{}, false, nil
	}
	e.o.tableYAML = unmarkedTable
	defer func() { e.o.tableYAML = defaultTable }()
	progress("drain: binlog-relay again without SENT marks, %d rows", e.o.backlog)
	r, err := drainRelay(ctx, e)
	if err != nil {
		return r, false, err
	}
	progress("  binlog-relay without SENT marks: %.0f msg/s (all in %s)", r.rate, r.totalTime.Round(time.Millisecond))
	return r, true, nil
}

func drainBoth(ctx context.Context, e *env, rep *report, size int) (drainResult, drainResult, error) {
	progress("drain (%d SENT rows in the table): binlog-relay, %d rows", size, e.o.backlog)
	rr, err := drainRelay(ctx, e)
	if err != nil {
		return rr, rr, fmt.Errorf("relay: %w", err)
	}
	progress("  binlog-relay: %.0f msg/s (first delivery after %s, all in %s), primary statements %d (proxy %d)",
		rr.rate, rr.first.Round(time.Millisecond), rr.totalTime.Round(time.Millisecond), rr.load.stmts.questions, rr.load.wire.questions)
	noisy(rr.load)
	progress("drain (%d SENT rows in the table): poller, %d rows", size, e.o.backlog)
	pr, err := drainPoller(ctx, e)
	if err != nil {
		return rr, pr, fmt.Errorf("poller: %w", err)
	}
	progress("  poller: %.0f msg/s (all in %s), primary statements %d (proxy %d)", pr.rate, pr.totalTime.Round(time.Millisecond), pr.load.stmts.questions, pr.load.wire.questions)
	noisy(pr.load)
	rep.scaleAt(size)["drain_relay"] = rr.rate
	rep.scaleAt(size)["drain_poller"] = pr.rate
	return rr, pr, nil
}

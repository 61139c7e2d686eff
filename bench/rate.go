package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// rateResult is one fixed-rate run.
type rateResult struct {
	p50, p99, max time.Duration
	msgs, dups    int
	busy, idle    load
	rss           int64
	behind        time.Duration // how far the producer fell behind its schedule

	// replication delay primary -> replica meanwhile (relay runs only)
	replicaLag50, replicaLag99, replicaLagMax time.Duration
}

// fixedRate runs a contender while the producer commits rate rows/s for d,
// then leaves it idle for idle.
func fixedRate(ctx context.Context, e *env, c *contender, d, idle time.Duration) (rateResult, error) {
	var r rateResult
	if err := c.start(ctx); err != nil {
		return r, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.stop()
		}
	}()
	if err := sleep(ctx, time.Second); err != nil { // let start-up statements pass
		return r, err
	}
	prefix := e.nextPrefix("l")
	total := int(float64(e.o.rate) * d.Seconds())
	s := e.consumer.expect(prefix, total, true)
	before, err := e.sampleLoad(ctx)
	if err != nil {
		return r, err
	}
	var probe *lagProbe
	if c.label == "relay" {
		probe = startLagProbe(ctx, e)
	}
	r.behind, err = produce(ctx, e, prefix, total, e.o.rate)
	if probe != nil {
		r.replicaLag50, r.replicaLag99, r.replicaLagMax = probe.stop()
	}
	if err != nil {
		return r, err
	}
	if err := s.wait(ctx, 120*time.Second); err != nil {
		return r, err
	}
	if e.o.latencyTrace != "" {
		if err := appendTrace(e.o.latencyTrace, s, c.label); err != nil {
			return r, err
		}
	}
	if c.label != "relay" || e.relayMarks() {
		if err := e.waitAllSent(ctx, 30*time.Second); err != nil {
			return r, err
		}
	}
	after, err := e.sampleLoad(ctx)
	if err != nil {
		return r, err
	}
	r.busy = loadBetween(before, after)
	r.p50, r.p99, r.max, _ = s.percentiles()
	r.msgs, r.dups = s.counts()
	if idle > 0 {
		if err := sleep(ctx, idle); err != nil {
			return r, err
		}
		end, err := e.sampleLoad(ctx)
		if err != nil {
			return r, err
		}
		r.idle = loadBetween(after, end)
	}
	if c.rss != nil {
		r.rss = c.rss()
	}
	stopped = true
	if err := c.stop(); err != nil {
		return r, err
	}
	return r, e.reset(ctx)
}

// lagProbe samples how long the replica takes to apply what the primary
// has committed: every 100 ms it reads the primary's GTID position (a bench
// statement, subtracted from the primary's load like the others) and times
// the wait for it on the replica (waitApplied). binlog-relay reads the
// replica, so this delay is part of its commit-to-delivery latency; the rest
// is the relay and the broker.
type lagProbe struct {
	cancel context.CancelFunc
	done   chan struct{}
	lags   []time.Duration
}

func startLagProbe(ctx context.Context, e *env) *lagProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &lagProbe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			pos, err := e.primaryPos(ctx)
			if err != nil {
				continue
			}
			start := time.Now()
			if err := waitApplied(ctx, e.replica, pos, 10*time.Second); err != nil {
				continue
			}
			p.lags = append(p.lags, time.Since(start))
		}
	}()
	return p
}

// stop ends the probe and returns p50, p99 and max.
func (p *lagProbe) stop() (p50, p99, mx time.Duration) {
	p.cancel()
	<-p.done
	if len(p.lags) == 0 {
		return 0, 0, 0
	}
	slices.Sort(p.lags)
	at := func(q float64) time.Duration { return p.lags[min(int(q*float64(len(p.lags))), len(p.lags)-1)] }
	return at(0.5), at(0.99), p.lags[len(p.lags)-1]
}

// produce commits total rows at rate rows/s, one row per autocommit
// INSERT, from a few connections so one slow commit does not delay the
// schedule. Each row's payload holds the time taken just before its INSERT
// was sent, so the measured latency includes the commit itself. It returns
// how far the schedule slipped at worst.
func produce(ctx context.Context, e *env, prefix string, total, rate int) (time.Duration, error) {
	return produceInto(ctx, e, "producer_message", prefix, total, rate)
}

// produceInto is produce into another table (schema.table: the tenants
// step's quiet tenant).
func produceInto(ctx context.Context, e *env, table, prefix string, total, rate int) (time.Duration, error) {
	const workers = 4
	if e.producer == nil {
		db, err := e.openPrimary(workers)
		if err != nil {
			return 0, err
		}
		e.producer = db
	}
	type job struct {
		seq int
		due time.Time
	}
	jobs := make(chan job, 256)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		werr    error
		behind  atomic.Int64
		failed  = make(chan struct{})
	)
	q := "INSERT INTO " + table + " (message_id, exchange, routing_key, content, next_retry_time) VALUES (?, ?, 'bench.created', ?, NOW(3))"
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				now := time.Now()
				if lag := now.Sub(j.due); lag > time.Duration(behind.Load()) {
					behind.Store(int64(lag))
				}
				if _, err := e.producer.ExecContext(ctx, q, fmt.Sprintf("%s%d", prefix, j.seq), e.topo.exchange, payload(now, e.o.payload)); err != nil {
					errOnce.Do(func() { werr = fmt.Errorf("producer: %w", err); close(failed) })
					return
				}
			}
		}()
	}
	start := time.Now()
	interval := time.Second / time.Duration(rate)
loop:
	for i := 0; i < total; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case jobs <- job{seq: i, due: due}:
		case <-failed:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	if werr != nil {
		return 0, werr
	}
	return time.Duration(behind.Load()), ctx.Err()
}

// latencyStep is steps 3, 4 and 6 (steady): each contender at the fixed
// rate for -duration, then idle for -idle.
func latencyStep(ctx context.Context, e *env, rep *report, size int) error {
	cs := []*contender{relayContender(e)}
	for _, iv := range e.o.pollIntervals {
		cs = append(cs, pollerContender(e, pollLabel(iv), iv))
	}
	for _, c := range cs {
		progress("fixed rate (%d SENT rows in the table): %s, %d rows/s for %s, then idle %s", size, c.label, e.o.rate, e.o.duration, e.o.idle)
		r, err := fixedRate(ctx, e, c, e.o.duration, e.o.idle)
		if err != nil {
			return fmt.Errorf("%s: %w", c.label, err)
		}
		reportRate(e, rep, c.label, r, size, true)
		if c.label == "relay" || c.label == pollLabel(e.o.scalePoll) {
			tag := "scale_" + sizeLabel(size) + "_latency_" + c.label
			rep.add(tag+"_p50_ms", ms(r.p50), "ms")
			rep.add(tag+"_p99_ms", ms(r.p99), "ms")
		}
		if c.label == "relay" {
			rep.add("rss_relay_steady_peak_mb", mb(r.rss), "MB")
		}
	}
	return nil
}

func reportRate(e *env, rep *report, label string, r rateResult, size int, main bool) {
	f := rep.scaleAt(size)
	f["p50_"+label], f["p99_"+label] = ms(r.p50), ms(r.p99)
	progress("  %s: %d delivered (%d duplicates), p50 %s p99 %s max %s; primary: %d statements busy (%d select, %d update; proxy %d), %d idle (proxy %d); producer behind at most %s",
		label, r.msgs, r.dups, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.max.Round(10*time.Microsecond),
		r.busy.stmts.questions, r.busy.stmts.selects, r.busy.stmts.updates, r.busy.wire.questions, r.idle.stmts.questions, r.idle.wire.questions,
		r.behind.Round(time.Millisecond))
	noisy(r.busy)
	noisy(r.idle)
	if r.replicaLagMax > 0 {
		progress("  replica apply delay meanwhile: p50 %s p99 %s max %s", r.replicaLag50.Round(10*time.Microsecond),
			r.replicaLag99.Round(10*time.Microsecond), r.replicaLagMax.Round(10*time.Microsecond))
	}
	if !main {
		return
	}
	if r.replicaLagMax > 0 {
		rep.add("replica_apply_delay_p50_ms", ms(r.replicaLag50), "ms")
		rep.add("replica_apply_delay_p99_ms", ms(r.replicaLag99), "ms")
	}
	rep.add("latency_"+label+"_p50_ms", ms(r.p50), "ms")
	rep.add("latency_"+label+"_p99_ms", ms(r.p99), "ms")
	rep.add("latency_"+label+"_max_ms", ms(r.max), "ms")
	rep.add("primary_"+label+"_stmts_per_1k_msgs", per1k(r.busy.stmts.questions, r.msgs), "stmt")
	rep.add("primary_"+label+"_selects_per_1k_msgs", per1k(r.busy.stmts.selects, r.msgs), "stmt")
	rep.add("primary_"+label+"_updates_per_1k_msgs", per1k(r.busy.stmts.updates, r.msgs), "stmt")
	rep.add("primary_"+label+"_wire_stmts_per_1k_msgs", per1k(r.busy.wire.questions, r.msgs), "stmt")
	if e.primaryPID > 0 {
		rep.add("primary_"+label+"_cpu_ms_per_1k_msgs", per1kDur(r.busy.cpu, r.msgs), "ms")
	}
	if r.idle.elapsed > 0 {
		rep.add("primary_"+label+"_idle_stmts_per_min", float64(r.idle.stmts.questions)/r.idle.elapsed.Minutes(), "stmt/min")
		rep.add("primary_"+label+"_wire_idle_stmts_per_min", float64(r.idle.wire.questions)/r.idle.elapsed.Minutes(), "stmt/min")
		if e.primaryPID > 0 {
			rep.add("primary_"+label+"_idle_cpu_pct", 100*r.idle.cpu.Seconds()/r.idle.elapsed.Seconds(), "%")
		}
	}
	if r.behind > 50*time.Millisecond {
		progress("  warning: the producer fell %s behind its schedule", r.behind.Round(time.Millisecond))
	}
}

func appendTrace(path string, s *sink, label string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("-latency-trace: %w", err)
	}
	if err := s.trace(f, label); err != nil {
		_ = f.Close()
		return fmt.Errorf("-latency-trace: %w", err)
	}
	return f.Close()
}

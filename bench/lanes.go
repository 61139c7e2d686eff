package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// lanesRun is one configuration of the lanes step.
type lanesRun struct {
	label    string // figure prefix
	lanes    int
	ordering string
}

var lanesRuns = []lanesRun{
	{"lanes_1", 1, "relaxed"},
	{"lanes_4", 4, "relaxed"},
	{"strict_lanes_4", 4, "strict"},
	{"strict_lanes_1", 1, "strict"},
}

// lanesTable keys the seed table by its routing_key column, which the
// step fills with one of -lanes-keys keys.
const lanesTable = "{preset: producer-message, route: {partition_key: routing_key}}"

// lanesStep measures ordered lanes (docs/ordering.md) in one run on one
// stack: the broker's limit with 1 and 4 publishing channels, then the
// relay draining -lanes-backlog rows spread over -lanes-keys keys with
// each configuration of lanesRuns, and the relay's CPU time per message.
// One relay name runs them all: each run starts from the checkpoint the
// previous one saved when it stopped, so only the first needs a warm-up.
func lanesStep(ctx context.Context, e *env, rep *report) error {
	n := e.o.lanesBacklog
	for _, ch := range []int{1, 4} {
		if err := quiesceBrief(ctx, e); err != nil {
			return err
		}
		r, err := brokerRun(ctx, e, n, ch)
		if err != nil {
			return fmt.Errorf("broker limit, %d channels: %w", ch, err)
		}
		progress("lanes: broker limit with %d channel(s): %.0f msg/s", ch, r.rate)
		rep.add(fmt.Sprintf("broker_limit_%dch_msgs_per_s", ch), r.rate, "msg/s")
	}
	savedTable, savedRelay := e.o.tableYAML, e.relaySection
	e.o.tableYAML = lanesTable
	defer func() { e.o.tableYAML, e.relaySection = savedTable, savedRelay }()
	name := fmt.Sprintf("bench-lanes-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	if err := warmUp(ctx, e, name); err != nil {
		return err
	}
	rates := map[string]float64{}
	for _, run := range lanesRuns {
		e.relaySection = fmt.Sprintf("lanes: %d, ordering: %s", run.lanes, run.ordering)
		r, err := lanesDrain(ctx, e, name, n)
		if err != nil {
			return fmt.Errorf("%s: %w", run.label, err)
		}
		rates[run.label] = r.rate
		progress("lanes: %s: %.0f msg/s, relay CPU %.1f ms per 1,000 messages", run.label, r.rate, per1kDur(r.relayCPU, n))
		rep.add(run.label+"_drain_msgs_per_s", r.rate, "msg/s")
		rep.add(run.label+"_relay_cpu_ms_per_1k_msgs", per1kDur(r.relayCPU, n), "ms")
		if run.label == "lanes_4" {
			rep.add("relay_cpu_ms_per_1k_msgs", per1kDur(r.relayCPU, n), "ms")
		}
	}
	if rates["lanes_4"] > 0 {
		rep.add("strict_lanes_4_vs_relaxed_pct", 100*rates["strict_lanes_4"]/rates["lanes_4"], "%")
	}
	return e.reset(ctx)
}

// quiesceBrief is quiesce with a shorter wait for an idle machine, so the
// step stays short on a shared one.
func quiesceBrief(ctx context.Context, e *env) error {
	pos, err := e.primaryPos(ctx)
	if err != nil {
		return err
	}
	if err := waitApplied(ctx, e.replica, pos, 300*time.Second); err != nil {
		return fmt.Errorf("the replica did not reach %s: %w", pos, err)
	}
	return waitMachineIdle(ctx, 10*time.Second)
}

// warmUp runs the relay named name until it saved a checkpoint (one row),
// then stops it.
func warmUp(ctx context.Context, e *env, name string) error {
	e.relaySection = ""
	return e.runToCheckpoint(ctx, name, func(prefix string) error { return insertKeyedRows(ctx, e, prefix, 1) })
}

// lanesDrain commits n keyed rows while the relay named name is stopped,
// then starts it (from its checkpoint) and times the drain from its start
// to the last delivery; the relay process's CPU is counted from its start
// (checks and connections included: a few tens of milliseconds) until
// every row is SENT. It stops with SIGTERM, which saves the checkpoint
// after the backlog.
func lanesDrain(ctx context.Context, e *env, name string, n int) (drainResult, error) {
	var r drainResult
	prefix := e.nextPrefix("ln")
	if err := insertKeyedRows(ctx, e, prefix, n); err != nil {
		return r, err
	}
	if err := quiesceBrief(ctx, e); err != nil {
		return r, err
	}
	s := e.consumer.expect(prefix, n, false)
	start := time.Now()
	p, err := e.startRelay(ctx, name, true)
	if err != nil {
		return r, err
	}
	defer p.kill()
	if err := s.wait(ctx, 10*time.Minute); err != nil {
		return r, err
	}
	if err := e.waitAllSent(ctx, 60*time.Second); err != nil {
		return r, err
	}
	_, last := s.span()
	r = drainResult{rate: float64(n) / last.Sub(start).Seconds(), msgs: n, relayCPU: p.cpu(), totalTime: last.Sub(start)}
	if _, dups := s.counts(); dups > 0 {
		progress("  %d duplicates", dups)
	}
	return r, p.stop()
}

// insertKeyedRows commits n PENDING rows in 1,000-row INSERTs, each row's
// routing_key (its partition key) one of -lanes-keys keys at random.
func insertKeyedRows(ctx context.Context, e *env, prefix string, n int) error {
	content := payload(time.Time{}, e.o.payload)
	var b strings.Builder
	for i := 0; i < n; i += 1000 {
		b.Reset()
		b.WriteString("INSERT INTO producer_message (message_id, exchange, routing_key, content, status, next_retry_time) VALUES ")
		for j := i; j < min(i+1000, n); j++ {
			if j > i {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s%d','%s','k%d','%s','PENDING',NOW(3))", prefix, j, e.topo.exchange, rand.IntN(e.o.lanesKeys), content)
		}
		if _, err := e.primary.ExecContext(ctx, b.String()); err != nil {
			return fmt.Errorf("inserting rows: %w", err)
		}
	}
	return nil
}

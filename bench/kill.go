package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// killStep measures duplicates per SIGKILL: a relay streaming the producer's
// rows at -kill-rate is killed -kills times and started again at once each
// time (same name, so from its checkpoint). Every row must arrive; the
// duplicates the consumer saw, divided by the kills, is the figure. The
// relay runs with the shipped checkpoint and flush intervals.
//
// Two runs: the kills evenly through -kill-duration by the deliveries
// counted (most land while the relay catches up what came in while it was
// down, as repeated crashes do), then the kills only once the relay keeps
// up with the rate (every delivery within keepUp of its commit for a
// second), as a single crash in steady traffic does. The second run also
// times each recovery: from the kill to keeping up again. Just before each
// kill the relay's binlog_relay_unmarked_rows is read: the confirmed rows
// not yet marked, which the restart publishes again; the rest of a kill's
// duplicates are messages published and not yet confirmed.
func killStep(ctx context.Context, e *env, rep *report) error {
	rate, kills := e.o.killRate, e.o.kills
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	e.relayHTTP = addr
	defer func() { e.relayHTTP = "" }()
	total := int(float64(rate) * e.o.killDuration.Seconds())
	progress("sigkill: %d rows at %d rows/s, the relay killed %d times and restarted", total, rate, kills)
	lost, dups, per, err := killRun(ctx, e, total, func(k int, s *sink) (bool, error) {
		at := k * total / (kills + 2)
		_, err := waitFor(ctx, 2*time.Minute, func() bool { d, _ := s.counts(); return d >= at },
			func() error {
				d, _ := s.counts()
				return fmt.Errorf("only %d of %d rows delivered before kill %d", d, at, k)
			})
		return false, err
	})
	if err != nil {
		return err
	}
	rep.add("sigkill_rows_lost", float64(lost), "rows")
	rep.add("sigkill_duplicates_per_kill", float64(dups)/float64(kills), "rows")
	addUnmarked(rep, "sigkill_unmarked_at_kill", per)

	// A recovery on a slow replica takes several seconds: room for each.
	steadyTotal := max(total, rate*kills*10)
	progress("sigkill in steady traffic: %d rows at %d rows/s, the relay killed %d times, each once it keeps up", steadyTotal, rate, kills)
	lost, _, recs, err := killRun(ctx, e, steadyTotal, func(k int, s *sink) (bool, error) {
		held := time.Time{}
		kept, err := waitFor(ctx, steadyWait, func() bool {
			if !s.keepingUp(keepUp) {
				held = time.Time{}
				return false
			}
			if held.IsZero() {
				held = time.Now()
			}
			return time.Since(held) >= time.Second
		}, func() error { return nil })
		if err == nil && !kept {
			progress("kill %d: the relay did not keep up with %d rows/s for a second within %s; killed anyway, left out of sigkill_steady_*", k, rate, steadyWait)
		}
		return kept, err
	})
	if err != nil {
		return err
	}
	var steady []killRecord
	for _, r := range recs {
		if r.steady {
			steady = append(steady, r)
		}
	}
	rep.add("sigkill_steady_rows_lost", float64(lost), "rows")
	rep.add("sigkill_steady_kills", float64(len(steady)), "kills")
	if len(steady) == 0 {
		return fmt.Errorf("sigkill in steady traffic: the relay never kept up with %d rows/s", rate)
	}
	var dupsPer []int
	var recovery []time.Duration
	for _, r := range steady {
		dupsPer = append(dupsPer, r.dups)
		if r.recovery > 0 {
			recovery = append(recovery, r.recovery)
		}
	}
	sum := 0
	for _, d := range dupsPer {
		sum += d
	}
	rep.add("sigkill_steady_duplicates_per_kill", float64(sum)/float64(len(dupsPer)), "rows")
	rep.add("sigkill_steady_duplicates_max", float64(slices.Max(dupsPer)), "rows")
	addUnmarked(rep, "sigkill_steady_unmarked_at_kill", steady)
	if len(recovery) > 0 {
		slices.Sort(recovery)
		rep.add("sigkill_steady_recovery_p50_ms", ms(recovery[len(recovery)/2]), "ms")
		rep.add("sigkill_steady_recovery_max_ms", ms(recovery[len(recovery)-1]), "ms")
	}
	return nil
}

// steadyWait is how long the steady run waits for the relay to keep up
// before a kill; past it the kill is made anyway and left out.
const steadyWait = 30 * time.Second

// keepUp is how close to its commit a delivery counts as keeping up.
const keepUp = time.Second

// killRecord is one kill of a run.
type killRecord struct {
	steady   bool          // made once the relay kept up (the run's before said so)
	dups     int           // duplicates seen after it: until the next kill, or the end
	unmarked float64       // binlog_relay_unmarked_rows just before it; -1 when not read
	recovery time.Duration // from it to keeping up again, when the next kill waited for that
}

// addUnmarked reports the mean of the unmarked rows read before the kills.
func addUnmarked(rep *report, name string, recs []killRecord) {
	sum, n := 0.0, 0
	for _, r := range recs {
		if r.unmarked >= 0 {
			sum += r.unmarked
			n++
		}
	}
	if n > 0 {
		rep.add(name, sum/float64(n), "rows")
	}
}

var unmarkedLine = regexp.MustCompile(`(?m)^binlog_relay_unmarked_rows(?:\{[^}]*\})? ([0-9.e+]+)$`)

// unmarkedRows reads binlog_relay_unmarked_rows from the relay's metrics.
func unmarkedRows(ctx context.Context, addr string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	m := unmarkedLine.FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("no binlog_relay_unmarked_rows in the relay's metrics")
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// killRun streams total rows at -kill-rate through a relay and kills it
// -kills times, each once before(k) returns; before reports whether the
// relay kept up, which makes the kill a steady one and the time from the
// kill before to that point a recovery. It returns the rows lost, the
// duplicates seen and a record of each kill.
func killRun(ctx context.Context, e *env, total int, before func(k int, s *sink) (bool, error)) (lost, dups int, recs []killRecord, err error) {
	if err := waitMachineIdle(ctx, 30*time.Second); err != nil {
		return 0, 0, nil, err
	}
	name := fmt.Sprintf("bench-kill-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	p, err := e.startRelay(ctx, name, true)
	if err != nil {
		return 0, 0, nil, err
	}
	defer func() { p.kill() }()
	if err := sleep(ctx, time.Second); err != nil { // let start-up statements pass
		return 0, 0, nil, err
	}
	prefix := e.nextPrefix("k")
	s := e.consumer.expect(prefix, total, false)
	produced := make(chan error, 1)
	go func() { _, err := produce(ctx, e, prefix, total, e.o.killRate); produced <- err }()
	var killedAt time.Time
	dupsAt := 0
	for k := 1; k <= e.o.kills; k++ {
		steady, err := before(k, s)
		if err != nil {
			return 0, 0, nil, err
		}
		_, d := s.counts()
		if k > 1 {
			recs[k-2].dups = d - dupsAt
			if steady {
				recs[k-2].recovery = time.Since(killedAt) - time.Second // the second it held
			}
		}
		rec := killRecord{steady: steady, unmarked: -1}
		if n, err := unmarkedRows(ctx, e.relayHTTP); err == nil {
			rec.unmarked = n
		} else {
			progress("kill %d: the relay's unmarked rows not read: %v", k, err)
		}
		recs = append(recs, rec)
		dupsAt, killedAt = d, time.Now()
		p.kill()
		if p, err = e.startRelay(ctx, name, true); err != nil {
			return 0, 0, nil, fmt.Errorf("restart after kill %d: %w", k, err)
		}
	}
	if err := <-produced; err != nil {
		return 0, 0, nil, err
	}
	if err := s.wait(ctx, 3*time.Minute); err != nil {
		return 0, 0, nil, err
	}
	if err := e.waitAllSent(ctx, 60*time.Second); err != nil {
		return 0, 0, nil, err
	}
	distinct, dups := s.counts()
	if len(recs) > 0 {
		recs[len(recs)-1].dups = dups - dupsAt
	}
	if err := p.stop(); err != nil {
		return 0, 0, nil, err
	}
	return total - distinct, dups, recs, e.reset(ctx)
}

// waitFor polls cond every 10 ms until it holds (true) or within passes
// (the error late returns).
func waitFor(ctx context.Context, within time.Duration, cond func() bool, late func() error) (bool, error) {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false, late()
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return false, err
		}
	}
	return true, nil
}

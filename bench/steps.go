package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// contender is binlog-relay or the poller, as one run sees it.
type contender struct {
	label string // in figure names: relay, poller, poll_1s, poll_100ms
	start func(ctx context.Context) error
	stop  func() error
	rss   func() int64 // peak RSS so far; nil when not measured
}

// relayContender runs a fresh relay (a new name: no checkpoint, so it starts
// at the replica's current position).
func relayContender(e *env) *contender {
	name := fmt.Sprintf("bench-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	c := &contender{label: "relay"}
	var p *relayProc
	c.start = func(ctx context.Context) (err error) { p, err = e.startRelay(ctx, name, false); return err }
	c.stop = func() error { return p.stop() }
	c.rss = func() int64 { return p.peakRSS() }
	return c
}

func pollerContender(e *env, label string, interval time.Duration) *contender {
	c := &contender{label: label}
	var p *poller
	c.start = func(context.Context) (err error) {
		if p, err = newPoller(e, interval); err == nil {
			p.start()
		}
		return err
	}
	c.stop = func() error { return p.halt() }
	return c
}

func pollLabel(d time.Duration) string { return "poll_" + d.String() }

// scaleStep is step 5 at one larger table size: both drains, then the
// relay and the poller at -scale-poll-interval for -scale-duration.
func scaleStep(ctx context.Context, e *env, rep *report, size int) error {
	rr, pr, err := drainBoth(ctx, e, rep, size)
	if err != nil {
		return err
	}
	tag := "scale_" + sizeLabel(size) + "_"
	rep.add(tag+"drain_relay_msgs_per_s", rr.rate, "msg/s")
	rep.add(tag+"drain_poller_msgs_per_s", pr.rate, "msg/s")
	for _, c := range []*contender{relayContender(e), pollerContender(e, pollLabel(e.o.scalePoll), e.o.scalePoll)} {
		progress("fixed rate (%d SENT rows in the table): %s, %d rows/s for %s", size, c.label, e.o.rate, e.o.scaleDuration)
		r, err := fixedRate(ctx, e, c, e.o.scaleDuration, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", c.label, err)
		}
		reportRate(e, rep, c.label, r, size, false)
		rep.add(tag+"latency_"+c.label+"_p50_ms", ms(r.p50), "ms")
		rep.add(tag+"latency_"+c.label+"_p99_ms", ms(r.p99), "ms")
	}
	return nil
}

// bigTxStep is step 6: one transaction of -big-tx rows through a fresh
// relay, and the relay's peak RSS meanwhile.
func bigTxStep(ctx context.Context, e *env, rep *report) error {
	n := e.o.bigTx
	progress("memory: one %d-row transaction", n)
	p, err := e.startRelay(ctx, fmt.Sprintf("bench-bigtx-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000)), false)
	if err != nil {
		return err
	}
	defer p.kill()
	prefix := e.nextPrefix("t")
	s := e.consumer.expect(prefix, n, false)
	tx, err := e.primary.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	e.ownStmts.note("START TRANSACTION")
	if err := e.insertRows(ctx, countedTx{tx, &e.ownStmts}, prefix, n, 1000, "PENDING"); err != nil {
		_ = tx.Rollback()
		return err
	}
	e.ownStmts.note("COMMIT")
	if err := tx.Commit(); err != nil {
		return err
	}
	committed := time.Now()
	if err := s.wait(ctx, 10*time.Minute); err != nil {
		return err
	}
	_, last := s.span()
	if e.relayMarks() {
		if err := e.waitAllSent(ctx, 60*time.Second); err != nil {
			return err
		}
	}
	rss := p.peakRSS()
	if err := p.stop(); err != nil {
		return err
	}
	progress("  relayed in %s after the commit, relay peak RSS %.1f MB", last.Sub(committed).Round(time.Millisecond), mb(rss))
	rep.add("rss_relay_bigtx_peak_mb", mb(rss), "MB")
	rep.add("bigtx_relay_seconds", last.Sub(committed).Seconds(), "s")
	return e.reset(ctx)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func per1k(n int64, msgs int) float64 {
	if msgs == 0 {
		return 0
	}
	return float64(n) * 1000 / float64(msgs)
}

func per1kDur(d time.Duration, msgs int) float64 {
	if msgs == 0 {
		return 0
	}
	return ms(d) * 1000 / float64(msgs)
}

func sizeLabel(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dm", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

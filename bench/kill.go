package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// killStep measures duplicates per SIGKILL: a relay streaming the producer's
// rows at -kill-rate is killed -kills times, evenly through -kill-duration,
// and started again at once each time (same name, so from its checkpoint).
// Every row must arrive; the duplicates the consumer saw, divided by the
// kills, is the figure. The relay runs with the shipped checkpoint and
// flush intervals.
func killStep(ctx context.Context, e *env, rep *report) error {
	rate, kills := e.o.killRate, e.o.kills
	total := int(float64(rate) * e.o.killDuration.Seconds())
	progress("sigkill: %d rows at %d rows/s, the relay killed %d times and restarted", total, rate, kills)
	if err := waitMachineIdle(ctx, 30*time.Second); err != nil {
		return err
	}
	name := fmt.Sprintf("bench-kill-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	p, err := e.startRelay(ctx, name, true)
	if err != nil {
		return err
	}
	defer func() { p.kill() }()
	if err := sleep(ctx, time.Second); err != nil { // let start-up statements pass
		return err
	}
	prefix := e.nextPrefix("k")
	s := e.consumer.expect(prefix, total, false)
	produced := make(chan error, 1)
	go func() { _, err := produce(ctx, e, prefix, total, rate); produced <- err }()
	for k := 1; k <= kills; k++ {
		at := k * total / (kills + 2)
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if d, _ := s.counts(); d >= at {
				break
			}
			if time.Now().After(deadline) {
				d, _ := s.counts()
				return fmt.Errorf("only %d of %d rows delivered before kill %d", d, at, k)
			}
			if err := sleep(ctx, 10*time.Millisecond); err != nil {
				return err
			}
		}
		p.kill()
		if p, err = e.startRelay(ctx, name, true); err != nil {
			return fmt.Errorf("restart after kill %d: %w", k, err)
		}
	}
	if err := <-produced; err != nil {
		return err
	}
	if err := s.wait(ctx, 3*time.Minute); err != nil {
		return err
	}
	if err := e.waitAllSent(ctx, 60*time.Second); err != nil {
		return err
	}
	distinct, dups := s.counts()
	rep.add("sigkill_rows_lost", float64(total-distinct), "rows")
	rep.add("sigkill_duplicates_per_kill", float64(dups)/float64(kills), "rows")
	if err := p.stop(); err != nil {
		return err
	}
	return e.reset(ctx)
}

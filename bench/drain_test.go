package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// BenchmarkRelayDrain runs binlog-relay in-process (internal/app, the same
// wiring as `binlog-relay run`) over a backlog of BENCH_BACKLOG rows
// (default 100,000) on the local stack, for profiling the binlog path:
//
//	BENCH_CPUPROFILE=$PWD/cpu.out go test ./bench -run '^$' -bench RelayDrain -benchtime 1x -o bench.test
//	go tool pprof -top bench.test cpu.out
//
// BENCH_CPUPROFILE profiles the drain alone (go test's -cpuprofile would
// also take in the setup: seeding the table, committing the backlog).
//
// Each iteration saves a checkpoint at the replica's current position,
// commits the backlog, then times the relay from start until it has
// published every row. Nothing consumes the queue in this process (the
// queue is purged after each iteration), so the profile is the relay's.
func BenchmarkRelayDrain(b *testing.B) {
	if testing.Short() {
		b.Skip("needs the stack (scripts/stack.sh up)")
	}
	o, err := parseFlags(nil)
	if err != nil {
		b.Fatal(err)
	}
	if v := os.Getenv("BENCH_BACKLOG"); v != "" {
		if o.backlog, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	o.noConsumer = true
	ctx := context.Background()
	e, err := newEnv(ctx, o)
	if err != nil {
		b.Fatal(err)
	}
	defer e.close()
	if err := e.growTo(ctx, 10000); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.StopTimer()
	var total drainStats
	for i := 0; i < b.N; i++ {
		d, err := drainInProcess(ctx, e, b)
		if err != nil {
			b.Fatal(err)
		}
		total.elapsed += d.elapsed
		total.cpu += d.cpu
		total.bytes += d.bytes
		total.mallocs += d.mallocs
	}
	n := float64(o.backlog * b.N)
	// Allocation per message hardly depends on the machine's load, unlike
	// time: the figure to compare changes by.
	b.ReportMetric(float64(total.bytes)/n, "B/msg")
	b.ReportMetric(float64(total.mallocs)/n, "allocs/msg")
	b.ReportMetric(n/total.elapsed.Seconds(), "msgs/s")
	b.ReportMetric(per1kDur(total.cpu, o.backlog*b.N), "cpu-ms/1k-msgs")
}

// drainStats is one in-process drain: wall time, the process's CPU time and
// its allocations while the relay drained.
type drainStats struct {
	elapsed, cpu   time.Duration
	bytes, mallocs uint64
}

// drainInProcess is one iteration; the timer runs only while the relay drains.
func drainInProcess(ctx context.Context, e *env, b *testing.B) (st drainStats, err error) {
	name := fmt.Sprintf("bench-prof-%d", time.Now().UnixNano())
	e.relayNames = append(e.relayNames, name)
	yaml, err := e.relayConfig(name, true)
	if err != nil {
		return st, err
	}
	_, _, _, spw, _ := hostPort(e.o.replicaDSN)
	_, _, _, ppw, _ := hostPort(e.o.primaryDSN)
	vars := map[string]string{"BENCH_SOURCE_PASSWORD": spw, "BENCH_PRIMARY_PASSWORD": ppw, "BENCH_AMQP_URL": e.o.amqpURL}
	cfg, err := config.Parse([]byte(yaml), func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		return st, err
	}
	a, err := app.Open(cfg, zap.NewNop())
	if err != nil {
		return st, err
	}
	defer a.Close()
	// The checkpoint is where the replica is now: the backlog comes after it.
	pos, err := a.Source.CurrentPosition(ctx)
	if err != nil {
		return st, err
	}
	server, err := a.Source.Identity(ctx)
	if err != nil {
		return st, err
	}
	if err := a.Store.Save(ctx, checkpoint.FromPosition(pos, server, time.Now())); err != nil {
		return st, err
	}
	n := e.o.backlog
	if _, err := commitBacklog(ctx, e, "prof"); err != nil {
		return st, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	cpu0 := processCPU(os.Getpid())
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if path := os.Getenv("BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return st, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return st, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	b.StartTimer()
	go func() { done <- a.Run(runCtx) }()
	for {
		if r := a.Relay(); r != nil && r.Stats.Published.Load() >= int64(n) {
			st.elapsed = time.Since(start)
			st.cpu = processCPU(os.Getpid()) - cpu0
			runtime.ReadMemStats(&m1)
			st.bytes, st.mallocs = m1.TotalAlloc-m0.TotalAlloc, m1.Mallocs-m0.Mallocs
			pprof.StopCPUProfile()
			break
		}
		select {
		case err := <-done:
			b.StopTimer()
			return st, fmt.Errorf("the relay stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Since(start) > 10*time.Minute {
			b.StopTimer()
			return st, errors.New("drain did not finish in 10 minutes")
		}
	}
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		return st, err
	}
	if err := e.topo.purge(); err != nil {
		return st, err
	}
	return st, e.reset(ctx)
}

// purge removes every message from the run's classic queue.
func (t topology) purge() error {
	conn, ch, err := dialChannel(t.amqpURL, false)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = ch.QueuePurge(t.queue, false)
	return err
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// replayRows is the size of the replay step's range.
const replayRows = 100000

// replayStep measures `binlog-relay replay` unthrottled (--rate 0) over
// replayRows SENT rows: its rate, and what it costs the replica it reads,
// in CPU per 1,000 rows. Like the reconcile step, the rows are loaded on
// the replica alone with sql_log_bin=0 (a replay reads nothing else). The
// relay's primary is the bench's counting proxy: the replay must send it
// no statement, and the step fails if it does.
func replayStep(ctx context.Context, e *env, rep *report) error {
	n := replayRows
	db := e.dbName + "_rp"
	progress("replay: %d SENT rows loaded on the replica, replayed unthrottled to the bench exchange", n)
	if err := createReconcileDB(ctx, e, db); err != nil { // reconcile.go: the seed outbox and inbox tables
		return err
	}
	defer dropReconcileDB(e, db)
	if err := loadReplicaRows(ctx, e, db, n, "rp-", "bench.original", false); err != nil { // reconcile.go
		return err
	}
	if err := waitMachineIdle(ctx, 30*time.Second); err != nil {
		return err
	}
	name := fmt.Sprintf("bench-rp-%d-%04d", time.Now().UnixNano()%1e9, rand.IntN(10000))
	e.relayNames = append(e.relayNames, name) // its keys are removed with the others
	prefix := "rp-"
	var s *sink
	if e.consumer != nil {
		s = e.consumer.expect(prefix, n, false)
	}
	procs := e.stackProcs(ctx)
	wire0, conns0 := e.wire.n.snapshot(), e.wire.proxy.Accepted()
	before := sampleCPU(procs)
	secs, own, err := runReplay(ctx, e, name, db)
	if err != nil {
		return err
	}
	if s != nil {
		if err := s.wait(ctx, 60*time.Second); err != nil {
			return fmt.Errorf("replayed messages: %w", err)
		}
		if d, dups := s.counts(); d != n || dups != 0 {
			return fmt.Errorf("replay delivered %d distinct messages with %d duplicates, want %d once each", d, dups, n)
		}
	}
	use := cpuBetween(before, sampleCPU(procs))
	wire, conns := e.wire.n.snapshot().sub(wire0), e.wire.proxy.Accepted()-conns0
	if wire.questions != 0 || conns != 0 {
		return fmt.Errorf("the replay connected to the primary %d times and sent it %d statements, want none", conns, wire.questions)
	}
	per1k := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / (float64(n) / 1000) }
	progress("  replayed %d rows in %.1fs (%.0f rows/s); replica CPU %s, replay process CPU %s; primary: %d statements",
		n, secs, float64(n)/secs, use.by["replica"].Round(time.Millisecond), own.Round(time.Millisecond), wire.questions)
	rep.add("replay_unthrottled_rows_per_second", float64(n)/secs, "rows/s")
	rep.add("replay_replica_cpu_ms_per_1000_rows", per1k(use.by["replica"]), "ms")
	rep.add("replay_process_cpu_ms_per_1000_rows", per1k(own), "ms")
	rep.add("replay_broker_cpu_ms_per_1000_rows", per1k(use.by["broker"]), "ms")
	rep.add("replay_primary_statements", float64(wire.questions), "statements")
	return nil
}

// runReplay runs `binlog-relay replay --rate 0` as a child process and
// returns its wall time and its own CPU time.
func runReplay(ctx context.Context, e *env, name, db string) (float64, time.Duration, error) {
	_, _, _, rpw, err := hostPort(e.o.replicaDSN)
	if err != nil {
		return 0, 0, err
	}
	yaml, err := e.relayConfig(name, true)
	if err != nil {
		return 0, 0, err
	}
	yaml = strings.Replace(yaml, "schema: "+e.dbName, "schema: "+db, 1)
	cfg := filepath.Join(e.tmp, name+".yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return 0, 0, err
	}
	_, _, _, ppw, _ := hostPort(e.o.primaryDSN)
	cmd := exec.CommandContext(ctx, e.relayBin, "replay", "--config", cfg, "--table", db+".producer_message",
		"--exchange", e.topo.exchange, "--rate", "0", "--chunk-size", "1000", "--progress-interval", "5s")
	cmd.Env = append(os.Environ(), "BENCH_SOURCE_PASSWORD="+rpw, "BENCH_PRIMARY_PASSWORD="+ppw, "BENCH_AMQP_URL="+e.o.amqpURL)
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("binlog-relay replay: %v\n%s%s", err, out.String(), tail(stderr.String(), 2000))
	}
	secs := time.Since(began).Seconds()
	if want := fmt.Sprintf("published %d, failed 0", replayRows); !strings.Contains(out.String(), want) {
		return 0, 0, fmt.Errorf("binlog-relay replay did not publish every row:\n%s", out.String())
	}
	return secs, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

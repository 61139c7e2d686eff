package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func checkpointKey(name string) string { return "binlog-relay:" + name + ":checkpoint" }

// relayConfig is the relay's YAML for the stack: the shipped defaults for
// everything that shapes the figures (batch size, flush interval, checkpoint
// interval, window, buffers), the HTTP endpoints off (their port may be taken
// on a shared machine; they read only the replica), and the seed table.
// binlogOnly turns the sweeper off, so a drain measures the binlog path
// alone even on a machine slow enough for the backlog to pass the sweeper's
// grace period. Passwords come from the environment, never the file.
func (e *env) relayConfig(name string, binlogOnly bool) (string, error) {
	sh, sp, su, _, err := hostPort(e.o.replicaDSN)
	if err != nil {
		return "", fmt.Errorf("-replica-dsn: %w", err)
	}
	_, _, pu, _, err := hostPort(e.o.primaryDSN)
	if err != nil {
		return "", fmt.Errorf("-primary-dsn: %w", err)
	}
	ph, pp := e.wire.hostPort()
	sweeper := ""
	if binlogOnly {
		sweeper = "sweeper: {enabled: false}\n"
	}
	if e.relaySection != "" {
		sweeper += "relay: {" + e.relaySection + "}\n"
	}
	httpAddr := "off"
	if e.relayHTTP != "" {
		httpAddr = e.relayHTTP
	}
	window := ""
	if e.o.brokerWindow > 0 {
		window = fmt.Sprintf(", window: %d", e.o.brokerWindow)
	}
	return fmt.Sprintf(`name: %s
source: {host: "%s", port: %d, user: "%s", password: "${BENCH_SOURCE_PASSWORD:-}"}
primary: {host: "%s", port: %d, user: "%s", password: "${BENCH_PRIMARY_PASSWORD:-}"}
broker: {url: "${BENCH_AMQP_URL}"%s}
redis: {addr: "%s"}
http: {addr: "%s"}
log: {level: info, format: json}
%stables:
  - %s
%s
`, name, sh, sp, su, ph, pp, pu, window, e.o.redisAddr, httpAddr, sweeper, e.relayTable(), e.o.relayYAML), nil
}

// relayTable is the relay's one table entry: the tenants step's pattern
// entry when set, else -relay-table in the run's database.
func (e *env) relayTable() string {
	if e.tableOverride != "" {
		return e.tableOverride
	}
	return tableEntry(e.o.tableYAML, e.dbName)
}

// relayMarks reports whether the relay's table has a status column (an
// experiment with -relay-table may take it away: then nothing is marked).
func (e *env) relayMarks() bool {
	t := strings.ReplaceAll(e.o.tableYAML, " ", "")
	return !strings.Contains(t, "status:''") && !strings.Contains(t, `status:""`)
}

// tableEntry adds the run's schema to a flow-style table entry.
func tableEntry(entry, schema string) string {
	entry = strings.TrimSpace(entry)
	if strings.HasPrefix(entry, "{") && strings.HasSuffix(entry, "}") {
		return strings.TrimSuffix(entry, "}") + ", schema: " + schema + "}"
	}
	return entry
}

// relayProc is binlog-relay run as a child process.
type relayProc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{}
	waitErr error
}

// startRelay runs `binlog-relay run` with a config named name and waits
// until it streams and is connected to the broker.
func (e *env) startRelay(ctx context.Context, name string, binlogOnly bool) (*relayProc, error) {
	yaml, err := e.relayConfig(name, binlogOnly)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(e.tmp, name+".yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	if !slices.Contains(e.relayNames, name) {
		e.relayNames = append(e.relayNames, name)
	}
	p := &relayProc{name: name, logPath: filepath.Join(e.tmp, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano())), done: make(chan struct{})}
	f, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	_, _, _, spw, _ := hostPort(e.o.replicaDSN)
	_, _, _, ppw, _ := hostPort(e.o.primaryDSN)
	p.cmd = exec.Command(e.relayBin, "run", "--config", cfg)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(os.Environ(), "BENCH_SOURCE_PASSWORD="+spw, "BENCH_PRIMARY_PASSWORD="+ppw, "BENCH_AMQP_URL="+e.o.amqpURL)
	p.cmd.Env = append(p.cmd.Env, e.o.relayEnv...)
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the relay: %w", err)
	}
	go func() { p.waitErr = p.cmd.Wait(); f.Close(); close(p.done) }()
	within := cmp.Or(e.startWithin, 30*time.Second)
	deadline := time.Now().Add(within)
	for {
		l := p.logText()
		if strings.Contains(l, "binlog stream connected") && strings.Contains(l, "broker connected") {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("the relay exited at start (%v):\n%s", p.waitErr, tail(p.logText(), 3000))
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("the relay did not start within %s:\n%s", within, tail(l, 3000))
		}
	}
}

func (p *relayProc) String() string { return "binlog-relay" }

func (p *relayProc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// peakRSS is the relay's peak resident set so far (VmHWM).
func (p *relayProc) peakRSS() int64 { return peakRSS(p.cmd.Process.Pid) }

// cpu is the relay's CPU time so far.
func (p *relayProc) cpu() time.Duration { return processCPU(p.cmd.Process.Pid) }

// stop sends SIGTERM (drain, save the checkpoint, exit 0) and waits.
func (p *relayProc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.kill()
		return errors.New("the relay did not stop within 60s of SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("the relay exited %d after SIGTERM:\n%s", code, tail(p.logText(), 3000))
	}
	return nil
}

func (p *relayProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// waitCheckpoint waits until the relay named name has saved a checkpoint.
func (e *env) waitCheckpoint(ctx context.Context, name string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n, err := e.redis.Exists(ctx, checkpointKey(name)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if n == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no checkpoint %s after %s", checkpointKey(name), within)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// checkpointAt runs a relay named name until it has delivered one warm-up
// row and saved a checkpoint, then stops it: the next start of that name
// drains whatever was committed meanwhile from the binlog.
func (e *env) checkpointAt(ctx context.Context, name string, spec rowSpec) error {
	warmSpec := spec
	warmSpec.size = e.o.payload
	return e.runToCheckpoint(ctx, name, func(prefix string) error {
		return insertRowsInto(ctx, e.primary, warmSpec, prefix, 1, 1, "PENDING")
	})
}

// runToCheckpoint starts the relay named name, commits one warm-up row
// with insert, waits for its delivery and a saved checkpoint, and stops
// the relay.
func (e *env) runToCheckpoint(ctx context.Context, name string, insert func(prefix string) error) error {
	p, err := e.startRelay(ctx, name, true)
	if err != nil {
		return err
	}
	warm := e.nextPrefix("w")
	s := e.consumer.expect(warm, 1, false)
	if err := insert(warm); err != nil {
		p.kill()
		return err
	}
	if err := s.wait(ctx, 30*time.Second); err != nil {
		p.kill()
		return fmt.Errorf("warm-up row: %w", err)
	}
	if err := e.waitCheckpoint(ctx, name, 10*time.Second); err != nil {
		p.kill()
		return err
	}
	return p.stop()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

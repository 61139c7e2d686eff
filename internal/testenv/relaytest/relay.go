// Package relaytest owns the relay under test: its config for the local
// test stack (Config), the relay run in-process (StartRelay) or as a child
// process (StartProcess), and the relay configs shown in the documentation
// (DocConfigs). It sits above internal/testenv, which owns the servers and
// stays free of the relay's packages so that pkg/inbox's own tests can use
// it.
package relaytest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Relay is an in-process relay.
type Relay struct {
	App    *app.App
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// StartRelay parses the config and runs the relay until Stop or the end of
// the test.
func StartRelay(t testing.TB, yaml string) *Relay {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), os.LookupEnv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	a, err := app.Open(cfg, log)
	if err != nil {
		t.Fatalf("opening relay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{App: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { _ = r.Stop(); a.Close() })
	testenv.Eventually(t, 20*time.Second, func() bool {
		select {
		case err := <-r.done:
			r.done <- err
			return true
		default:
		}
		return a.Relay() != nil && a.Relay().Started()
	}, "relay did not start")
	select {
	case err := <-r.done:
		t.Fatalf("relay exited at start: %v", err)
	default:
	}
	return r
}

// Stop stops gracefully and returns Run's error.
func (r *Relay) Stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(60 * time.Second):
			r.err = fmt.Errorf("relay did not stop within 60s")
		}
	})
	return r.err
}

// Binary builds cmd/binlog-relay once per test binary and returns its path.
var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary returns the path of a freshly built binlog-relay.
func Binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "binlog-relay-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "binlog-relay")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/binlog-relay")
		cmd.Dir = testenv.RepoPath("")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// WriteConfig writes a config file into the test's temp dir.
func WriteConfig(t testing.TB, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Process is the relay run as a child process (for SIGKILL/SIGTERM tests).
type Process struct {
	Cmd  *exec.Cmd
	Log  string
	done chan error
}

// StartProcess runs `binlog-relay run --config path`, logging to a file.
func StartProcess(t testing.TB, cfgPath string) *Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("relay-%d.log", time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Binary(t), "run", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting relay: %v", err)
	}
	p := &Process{Cmd: cmd, Log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("relay log %s:\n%s", logPath, tail(string(b), 4000))
		}
	})
	return p
}

// StartedProcess is StartProcess, then WaitStarted.
func StartedProcess(t testing.TB, cfgPath string) *Process {
	t.Helper()
	p := StartProcess(t, cfgPath)
	p.WaitStarted(t)
	return p
}

// WaitStarted waits until the process streams the binlog and is connected
// to the broker.
func (p *Process) WaitStarted(t testing.TB) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool {
		l := p.LogText()
		return strings.Contains(l, "binlog stream connected") && strings.Contains(l, "broker connected")
	}, "relay did not start:\n%s", p.LogText())
}

// Wait waits for the process to exit.
func (p *Process) Wait(within time.Duration) (exitCode int, err error) {
	select {
	case err := <-p.done:
		p.done <- err
		if p.Cmd.ProcessState != nil {
			return p.Cmd.ProcessState.ExitCode(), nil
		}
		return -1, err
	case <-time.After(within):
		return -1, fmt.Errorf("relay still running after %s", within)
	}
}

// LogText returns what the process logged so far.
func (p *Process) LogText() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

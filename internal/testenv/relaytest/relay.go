// Package relaytest owns the relay under test: its config for the local
// test stack (Config), the relay run in-process (StartRelay) or as a child
// process (StartProcess), the relay configs shown in the documentation
// (DocConfigs), and a pkg/inbox consumer receiving what it publishes
// (StartInbox). It sits above internal/testenv, which owns the servers and
// stays free of the relay's packages so that pkg/inbox's own tests can use
// it.
package relaytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Relay is an in-process relay.
type Relay struct {
	App *app.App
	*Background
}

// StartRelay parses the config and runs the relay until Stop or the end of
// the test.
func StartRelay(t testing.TB, yaml string) *Relay {
	t.Helper()
	a := OpenApp(t, yaml)
	r := &Relay{App: a, Background: Go("relay", 60*time.Second, a.Run)}
	t.Cleanup(func() { _ = r.Stop() })
	testenv.Eventually(t, 20*time.Second, func() bool {
		if exited, _ := r.Exited(); exited {
			return true
		}
		return a.Relay() != nil && a.Relay().Started()
	}, "relay did not start")
	if exited, err := r.Exited(); exited {
		t.Fatalf("relay exited at start: %v", err)
	}
	return r
}

// OpenApp parses the config and opens the app on it (connections, no
// stage running yet), closed when the test ends.
func OpenApp(t testing.TB, yaml string) *app.App {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), os.LookupEnv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := app.Open(cfg, zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)))
	if err != nil {
		t.Fatalf("opening relay: %v", err)
	}
	t.Cleanup(a.Close)
	return a
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
	testenv.WaitFor(t, 30*time.Second, "the relay to start", func() (bool, string) {
		l := p.LogText() // the last log seen, in the failure
		return strings.Contains(l, "binlog stream connected") && strings.Contains(l, "broker connected"), "log:\n" + l
	})
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

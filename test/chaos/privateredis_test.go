package chaos

import (
	"context"
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// privateRedis is a redis-server of the suite's own (the relays' lease and
// checkpoint store), so it can really be restarted while other tests use
// the stack's Redis.
type privateRedis struct {
	t    *testing.T
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan error
}

func startRedis(t *testing.T) *privateRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	r := &privateRedis{t: t, addr: addr, dir: t.TempDir()}
	r.start()
	t.Cleanup(func() { _ = r.cmd.Process.Kill(); <-r.done })
	return r
}

func (r *privateRedis) start() {
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--logfile", r.dir+"/redis.log")
	// Dies with the test binary, even a killed one.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("starting redis-server (scripts/stack.sh up installs it): %v", err)
	}
	r.done = make(chan error, 1)
	go func(c *exec.Cmd, done chan error) { done <- c.Wait() }(r.cmd, r.done)
	rc := redis.NewClient(&redis.Options{Addr: r.addr})
	defer rc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for rc.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not answer", r.addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restart stops Redis with SHUTDOWN SAVE, so its keys come back from the
// dump as from a Redis that persists (one that forgets the checkpoint is
// not a checkpoint store: docs/ha.md), and starts it again.
func (r *privateRedis) restart() time.Duration {
	began := time.Now()
	rc := redis.NewClient(&redis.Options{Addr: r.addr})
	_ = rc.ShutdownSave(context.Background()).Err() // the connection drops: no reply
	_ = rc.Close()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		r.t.Fatal("redis-server did not stop after SHUTDOWN SAVE")
	}
	r.start()
	return time.Since(began)
}

// quietRedis drops go-redis's own log lines (a dial refused while the
// harness restarts or cuts Redis): the journal says what happened.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedis{}) }

package chaos

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// fleet is the relays under test and the proxies between them and the
// servers: cutting a proxy is a server going away without touching a
// server other tests share.
type fleet struct {
	t         *testing.T
	name      string
	start     time.Time
	cfgs      [2]string
	ids       [2]uint32 // the relays' replica server ids
	procs     [2]*relaytest.Process
	broker    *faultproxy.Proxy
	brokerURL string // the broker's URL through the proxy
	redis     *faultproxy.Proxy
	replicas  [2]*faultproxy.Proxy // [0] replica2 (first in source.hosts), [1] replica
	rc        *redis.Client        // direct, for the test's own look-ups
	store     *privateRedis        // the relays' Redis
	real      bool                 // real RabbitMQ restarts
	cut       time.Duration        // how long a cut lasts
	journal   []string
}

func (f *fleet) note(format string, args ...any) {
	line := fmt.Sprintf("%6.1fs  ", time.Since(f.start).Seconds()) + fmt.Sprintf(format, args...)
	f.journal = append(f.journal, line)
	f.t.Log(line)
}

func (f *fleet) run(i int) {
	f.procs[i] = relaytest.StartProcess(f.t, f.cfgs[i])
}

func (f *fleet) kill(i int) {
	p := f.procs[i]
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	if _, err := p.Wait(10 * time.Second); err != nil {
		f.t.Fatalf("relay %d did not die: %v", i, err)
	}
}

// leader is the index of the relay holding the lease now, or -1.
func (f *fleet) leader() int {
	v, err := f.rc.Get(context.Background(), lease.LeaderKey(f.name)).Result()
	if err != nil {
		return -1
	}
	_, holder, _ := strings.Cut(v, ":")
	parts := strings.Split(holder, "-")
	if len(parts) < 3 {
		return -1
	}
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	for i, p := range f.procs {
		if p != nil && p.Cmd.Process.Pid == pid {
			return i
		}
	}
	return -1
}

// waitLeader waits for a leader other than not (-1: any).
func (f *fleet) waitLeader(not int, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		if l := f.leader(); l >= 0 && l != not {
			return l
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("no relay took the lease within %s", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fleet) stack(args ...string) {
	out, err := exec.Command(testenv.RepoPath("scripts/stack.sh"), args...).CombinedOutput()
	if err != nil {
		f.t.Fatalf("stack.sh %v: %v\n%s", args, err, out)
	}
}

// readingFrom is the index of the replica proxy the leader streams from
// (SHOW SLAVE HOSTS, SHOW REPLICAS on MySQL, on each replica), or -1.
func (f *fleet) readingFrom(leader int) int {
	for i, dsn := range []string{testenv.Replica2DSN, testenv.ReplicaDSN} {
		db := testenv.Open(f.t, dsn, "")
		for _, id := range testenv.FirstColumn(f.t, db, testenv.Current.ReplicaHostsSQL()) {
			if id == fmt.Sprint(f.ids[leader]) {
				return i
			}
		}
	}
	return -1
}

type event struct {
	name string
	do   func(f *fleet)
}

func schedule() []event {
	return []event{
		{"relay SIGKILL and restart", func(f *fleet) {
			l := f.waitLeader(-1, 30*time.Second)
			f.kill(l)
			f.run(l)
			f.note("killed the leader (relay %d) and restarted it", l)
		}},
		{"leader SIGKILL, standby takes over", func(f *fleet) {
			l := f.waitLeader(-1, 30*time.Second)
			f.kill(l)
			at := time.Now()
			n := f.waitLeader(l, 30*time.Second)
			f.note("killed the leader (relay %d); relay %d took over after %s", l, n, time.Since(at).Round(100*time.Millisecond))
			f.run(l)
		}},
		{"RabbitMQ restart", func(f *fleet) {
			if f.real {
				took := restartRabbit(f.t)
				f.note("restarted RabbitMQ (rabbitmqctl stop_app; start_app): %s", took.Round(100*time.Millisecond))
				return
			}
			f.broker.Cut()
			time.Sleep(f.cut / 2)
			f.broker.Restore()
			f.note("RabbitMQ gone for %s (proxy cut)", f.cut/2)
		}},
		{"Redis restart", func(f *fleet) {
			took := f.store.restart()
			f.note("restarted Redis (SHUTDOWN SAVE and start): %s", took.Round(100*time.Millisecond))
			f.redis.Cut()
			time.Sleep(f.cut / 2)
			f.redis.Restore()
			f.note("Redis unreachable for %s (proxy cut; past the lease TTL the leader steps down)", f.cut/2)
		}},
		{"replica restart", func(f *fleet) {
			from := f.readingFrom(f.waitLeader(-1, 30*time.Second))
			f.stack("restart", "replica2")
			f.note("restarted replica2 (the leader read from %s)", replicaName(from))
		}},
		{"failover to the second replica", func(f *fleet) {
			l := f.waitLeader(-1, 30*time.Second)
			from := f.readingFrom(l)
			if from < 0 {
				from = 0
			}
			f.replicas[from].Cut()
			time.Sleep(f.cut / 2)
			to := f.readingFrom(l)
			f.replicas[from].Restore()
			f.note("cut %s for %s: the leader moved to %s", replicaName(from), f.cut/2, replicaName(to))
		}},
		{"broker connection cut", func(f *fleet) {
			f.broker.Cut()
			time.Sleep(f.cut)
			f.broker.Restore()
			f.note("broker connections cut for %s", f.cut)
		}},
	}
}

func replicaName(i int) string {
	switch i {
	case 0:
		return "replica2"
	case 1:
		return "replica"
	default:
		return "no replica"
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

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

// restartRabbit restarts the RabbitMQ application and waits for AMQP.
func restartRabbit(t *testing.T) time.Duration {
	t.Helper()
	began := time.Now()
	// the CLI of the flavour's broker (RabbitMQ 4.3 runs as a node of its own)
	run(t, testenv.RepoPath("scripts/stack.sh"), "rabbitmqctl", "stop_app")
	run(t, testenv.RepoPath("scripts/stack.sh"), "rabbitmqctl", "start_app")
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := amqp.Dial(testenv.AMQPURL)
		if err == nil {
			_ = conn.Close()
			return time.Since(began)
		}
		if time.Now().After(deadline) {
			t.Fatalf("RabbitMQ did not come back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// On a small machine every process of the stack competes for the same
// cores, so a relay's throughput depends on what the whole stack spends per
// message, not only on the relay. cpuWatch reads the CPU time of each
// local process of the stack (/proc/<pid>/stat) so a step can say where the
// machine's time went.

// proc is one watched process; pid 0 means not found (remote server).
type proc struct {
	name string
	pid  int
}

// stackProcs finds the local processes of the stack: the broker, the MySQL
// servers (from their pid files), and the bench itself.
func (e *env) stackProcs(ctx context.Context) []proc {
	out := []proc{{"broker", brokerPID(e.o.amqpURL)}, {"primary", e.primaryPID}, {"replica", serverPID(ctx, e.replica)}}
	for i, db := range e.extras {
		out = append(out, proc{"replica" + strconv.Itoa(i+2), serverPID(ctx, db)})
	}
	return append(out, proc{"bench", os.Getpid()})
}

// serverPID finds a MySQL server's process when it runs on this machine
// (its pid file is readable), for its CPU time; 0 otherwise.
func serverPID(ctx context.Context, db rowQuerier) int {
	var path string
	if err := db.QueryRowContext(ctx, "SELECT @@pid_file").Scan(&path); err != nil {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if processCPU(pid) < 0 {
		return 0
	}
	return pid
}

// brokerPID is the broker's process: the beam.smp listening on the AMQP
// URL's port. The stack runs two RabbitMQ nodes (3.10 on 5672, 4.3 on
// 5673 for the other flavours), so the command name alone may pick the one
// the run does not use. Where the sockets cannot be read (not root), it is
// the first beam.smp.
func brokerPID(amqpURL string) int {
	port := 5672
	if u, err := amqp.ParseURI(amqpURL); err == nil {
		port = u.Port
	}
	if pid := listenerPID(port, "beam.smp"); pid > 0 {
		return pid
	}
	return findProcess("beam.smp")
}

// listenerPID is the pid of the process whose command is name and which
// holds a socket listening on TCP port (/proc/net/tcp and tcp6, then each
// such process's fds); 0 when there is none or it cannot be read.
func listenerPID(port int, name string) int {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// sl local_address rem_address st ... inode; the address is
		// ADDR:PORT in hex, st 0A is LISTEN.
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" {
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range comms {
		b, err := os.ReadFile(c)
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		dir := filepath.Dir(c)
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && inodes[l] {
				pid, _ := strconv.Atoi(filepath.Base(dir))
				return pid
			}
		}
	}
	return 0
}

// findProcess returns the pid of the first process whose command is name.
func findProcess(name string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return pid
	}
	return 0
}

// cpuSample is the CPU time of each watched process at one moment.
type cpuSample struct {
	at  time.Time
	cpu map[string]time.Duration
}

func sampleCPU(procs []proc) cpuSample {
	s := cpuSample{at: time.Now(), cpu: map[string]time.Duration{}}
	for _, p := range procs {
		if d := processCPU(p.pid); d >= 0 {
			s.cpu[p.name] = d
		}
	}
	return s
}

// cpuUse is CPU time per process between two samples.
type cpuUse struct {
	elapsed time.Duration
	by      map[string]time.Duration
}

func cpuBetween(a, b cpuSample) cpuUse {
	u := cpuUse{elapsed: b.at.Sub(a.at), by: map[string]time.Duration{}}
	for name, d := range b.cpu {
		if d0, ok := a.cpu[name]; ok {
			u.by[name] = d - d0
		}
	}
	return u
}

func (u cpuUse) total() time.Duration {
	var t time.Duration
	for _, d := range u.by {
		t += d
	}
	return t
}

// processCPU is a process's user+system CPU time from /proc, -1 if unknown.
func processCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck
}

// peakRSS is a process's VmHWM (peak resident set) in bytes, -1 if unknown.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return -1
}

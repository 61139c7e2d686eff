package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	out := []proc{{"broker", findProcess("beam.smp")}, {"primary", e.primaryPID}, {"replica", serverPID(ctx, e.replica)}}
	for i, db := range e.extras {
		out = append(out, proc{"replica" + strconv.Itoa(i+2), serverPID(ctx, db)})
	}
	return append(out, proc{"bench", os.Getpid()})
}

func serverPID(ctx context.Context, db *sql.DB) int {
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

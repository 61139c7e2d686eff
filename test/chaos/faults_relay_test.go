package chaos

import (
	"fmt"
	"strconv"
	"syscall"
	"time"
)

// The relays: killed, paused.

type relayKill struct{}

func (relayKill) Name() string                                  { return "relay-kill" }
func (relayKill) Available(*Schedule) bool                      { return true }
func (relayKill) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (relayKill) Bound(s *Schedule, _ Planned) int              { return crashBound(s) }
func (relayKill) Inject(e *env, _ Planned, _ *state) (string, error) {
	l, err := e.waitLeader(-1, 30*time.Second)
	if err != nil {
		return "", err
	}
	// What the restart will publish again beside the unconfirmed messages:
	// never above the ceiling the kill's bound counts.
	unmarked := e.unmarked(l)
	if err := e.killRelay(l); err != nil {
		return "", err
	}
	e.startRelay(l)
	detail := fmt.Sprintf("SIGKILL of the leader (relay %d; binlog_relay_unmarked_rows %s), started again at once", l, unmarked)
	if n, err := strconv.Atoi(unmarked); err == nil && n > maxUnmarked {
		return detail, fmt.Errorf("the leader counted %d rows confirmed and unmarked at the kill, above relay.max_unmarked %d", n, maxUnmarked)
	}
	return detail, nil
}
func (relayKill) Recover(*env, Planned, *state) (string, error) { return "", nil }

type leaderTakeover struct{}

func (leaderTakeover) Name() string                                  { return "leader-kill-takeover" }
func (leaderTakeover) Available(s *Schedule) bool                    { return s.Relays > 1 }
func (leaderTakeover) Hold(*Schedule) (time.Duration, time.Duration) { return 0, 0 }
func (leaderTakeover) Bound(s *Schedule, _ Planned) int              { return crashBound(s) }
func (leaderTakeover) Inject(e *env, _ Planned, _ *state) (string, error) {
	l, err := e.waitLeader(-1, 30*time.Second)
	if err != nil {
		return "", err
	}
	if err := e.killRelay(l); err != nil {
		return "", err
	}
	at := time.Now()
	n, err := e.waitLeader(l, 30*time.Second)
	if err != nil {
		return "", err
	}
	took := time.Since(at)
	e.startRelay(l)
	return fmt.Sprintf("SIGKILL of the leader (relay %d); relay %d took over after %s; the dead one started again", l, n, took.Round(100*time.Millisecond)), nil
}
func (leaderTakeover) Recover(*env, Planned, *state) (string, error) { return "", nil }

// relayPause stops the leader with SIGSTOP: with a lease, past its TTL (a
// standby takes over; the docs say the woken one publishes nothing);
// without one, for as long as the schedule draws (its sweeper must not send
// what its own reader has not reached).
type relayPause struct{}

func (relayPause) Name() string             { return "relay-pause" }
func (relayPause) Available(*Schedule) bool { return true }
func (relayPause) Hold(s *Schedule) (time.Duration, time.Duration) {
	if s.Relays > 1 {
		return span(s, [2]time.Duration{leaseTTL + 500*time.Millisecond, leaseTTL + 2*time.Second}, [2]time.Duration{leaseTTL + 500*time.Millisecond, 10 * time.Second})
	}
	return span(s, [2]time.Duration{2 * time.Second, 6 * time.Second}, [2]time.Duration{2 * time.Second, 75 * time.Second})
}
func (relayPause) Bound(s *Schedule, _ Planned) int {
	if s.Relays > 1 {
		return crashBound(s)
	}
	return windowBound(s) // the broker may close a connection that stops beating
}
func (relayPause) Inject(e *env, _ Planned, st *state) (string, error) {
	l, err := e.waitLeader(-1, 30*time.Second)
	if err != nil {
		return "", err
	}
	if err := e.relays[l].proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return "", err
	}
	e.relays[l].paused = true
	st.relay = l
	return fmt.Sprintf("SIGSTOP of the leader (relay %d)", l), nil
}
func (relayPause) Recover(e *env, _ Planned, st *state) (string, error) {
	r := e.relays[st.relay]
	if err := r.proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return "", err
	}
	r.paused = false
	if len(e.relays) > 1 {
		woke := time.Now()
		l := e.leader()
		if l != st.relay && l >= 0 && e.s.Traffic.Poison == 0 {
			// Deposed: what it publishes from now on is counted (a row
			// due for its sweeper would be too: none is due without
			// failing rows).
			e.mu.Lock()
			e.woken = append(e.woken, Woken{Relay: st.relay, At: woke, Until: woke.Add(2 * leaseTTL)})
			e.mu.Unlock()
		}
		return fmt.Sprintf("SIGCONT; relay %d leads", l), nil
	}
	return "SIGCONT", nil
}

// unmarked reads relay i's binlog_relay_unmarked_rows ("?" when its
// metrics do not answer).
func (e *env) unmarked(i int) string {
	return scrape(e.t, e.relays[i].httpAddr, "binlog_relay_unmarked_rows")
}

// unmarkedSettles waits up to within for relay i's
// binlog_relay_unmarked_rows to read 0 (a confirm may still wait for its
// flush when the row was SENT by the sweeper first), and returns the last
// value read.
func (e *env) unmarkedSettles(i int, within time.Duration) (string, bool) {
	deadline := time.Now().Add(within)
	for {
		n := e.unmarked(i)
		if n == "0" {
			return n, true
		}
		if time.Now().After(deadline) {
			return n, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

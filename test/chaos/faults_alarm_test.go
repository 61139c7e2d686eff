package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// The broker in a resource alarm, and the relay stopped meanwhile.

// drainTimeout is relay.drain_timeout as shipped: the chaos relays do not
// set it.
const drainTimeout = 30 * time.Second

// brokerAlarmStop raises a memory alarm on the flavour's broker, waits
// until the leader logs that the broker blocked its publishing, lets it go
// on publishing for Arg seconds, sends it SIGTERM and requires it to exit
// within relay.drain_timeout plus 10 s (else it is SIGKILLed and the fault
// fails, naming the hang); the recovery clears the alarm and starts the
// relay again under its name, to resume from its checkpoint. During an
// alarm RabbitMQ stops reading a publishing connection and sends no
// confirm, so the graceful stop cannot drain: at relay.drain_timeout the
// relay stops hard, and 2 s later the publisher closes its socket under a
// write the broker does not read, if one is blocked (before 57243db such a
// write kept the relay from ever exiting: CHANGELOG). The write blocks
// once the window outweighs the publisher's 4 MiB of pending writes and
// the socket buffers on the way: about 12.6 MB measured on MariaDB 10.11
// (the relay's send queue 3.9 MB, the proxy's receive queue 1.75 MB and
// send queue 3.9 MB, the broker's receive queue 3.05 MB), which a window
// of 256 rows of a few hundred bytes never does, and of 128 KiB does.
//
// The alarm is node-wide, on the broker every test of the flavour
// publishes to (there is no proxy between a broker and its own memory),
// for about Arg plus drainTimeout plus the hold. So random schedules never draw
// it: it applies to named scenarios only (broker-alarm-sigterm), and Draw
// names none, so the kinds it picks from, and every seed's schedule, are
// what they were without it.
type brokerAlarmStop struct{}

func (brokerAlarmStop) Name() string { return "broker-alarm-stop" }
func (brokerAlarmStop) Available(s *Schedule) bool {
	return s.Name != "" && s.Broker == "single"
}
func (brokerAlarmStop) Hold(*Schedule) (time.Duration, time.Duration) {
	return 2 * time.Second, 5 * time.Second
}

// Bound is a kill's: the drain cannot finish in an alarm, so the stop ends
// as a crash does at relay.drain_timeout. The messages published and not
// confirmed (at most broker.window per lane) are published again, and so
// are the confirmed rows whose SENT marks the hard stop cut off (at most
// relay.max_unmarked); into a stream the broker drops them.
func (brokerAlarmStop) Bound(s *Schedule, _ Planned) int { return crashBound(s) }

func (brokerAlarmStop) Inject(e *env, p Planned, st *state) (string, error) {
	l, err := e.waitLeader(-1, 30*time.Second)
	if err != nil {
		return "", err
	}
	st.relay = l
	a, err := raiseMemoryAlarm(e.t)
	st.alarm = a // cleared by Recover, or by the test's cleanup
	if err != nil {
		return "", err
	}
	r := e.relays[l]
	// The broker blocks a connection when it next publishes: the
	// scenario's traffic (30 rows/s) publishes all the time, so the line
	// comes within moments of the alarm. Its absence is a failure, not a
	// reason to go on: the stop would then not be the one in an alarm.
	line, err := waitLogLine(r.proc.LogText, "broker blocked publishing", 30*time.Second)
	if err != nil {
		return "", fmt.Errorf("relay %d: %w (memory alarm on since %s)", l, err, time.Since(a.raised).Round(100*time.Millisecond))
	}
	blocked := time.Since(a.raised)
	// Arg is the seconds the relay goes on publishing into the blocked
	// connection before the SIGTERM: long enough, at the traffic's rate,
	// for its window of unconfirmed messages to fill, and with the
	// traffic's Payload for them to outweigh the buffers on the way (its
	// socket's, the proxy's, the broker's), so that its write blocks.
	seen := time.Now()
	time.Sleep(time.Duration(p.Arg) * time.Second)
	passed := r.publishedBetween(seen, time.Now())
	if err := r.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return "", err
	}
	term := time.Now()
	code, err := r.proc.Wait(drainTimeout + 10*time.Second)
	if err != nil {
		kerr := e.killRelay(l)
		st.stopped = kerr == nil
		return "", fmt.Errorf("relay %d hung: SIGTERM during the broker's memory alarm (%ds after it logged the block, %d publishes through its proxy meanwhile) did not end it within relay.drain_timeout (%s) + 10 s; SIGKILLed (%v)",
			l, p.Arg, passed, drainTimeout, kerr)
	}
	st.stopped = true
	return fmt.Sprintf("memory alarm on the broker (vm_memory_high_watermark %s, alarm after %s); relay %d blocked after %s (%s); %d publishes through its proxy in the next %ds; SIGTERM: exited %d after %s",
		a.watermark, a.took.Round(100*time.Millisecond), l, blocked.Round(100*time.Millisecond), line, passed, p.Arg, code, time.Since(term).Round(100*time.Millisecond)), nil
}

func (brokerAlarmStop) Recover(e *env, _ Planned, st *state) (string, error) {
	var out []string
	var err error
	if st.alarm != nil {
		if err = st.alarm.clear(); err == nil {
			out = append(out, "alarm cleared")
		}
	}
	if st.stopped {
		e.startRelay(st.relay)
		out = append(out, fmt.Sprintf("relay %d started again", st.relay))
	}
	return strings.Join(out, "; "), err
}

// memoryAlarm is a memory alarm raised on the flavour's broker by setting
// its vm_memory_high_watermark below what the node uses, and cleared by
// setting the node's own value back (rabbitmqctl, through scripts/stack.sh
// rabbitmqctl: RabbitMQ 3.10 for MariaDB 10.11, 4.3 for MySQL 9.7 and
// MariaDB 11.8; both take the relative form). The setting lives in the
// running node only: a restart of the broker clears it too.
type memoryAlarm struct {
	watermark string        // the node's own, as get_vm_memory_high_watermark() says it
	raised    time.Time     // when the watermark was set
	took      time.Duration // until the node listed the alarm
	once      sync.Once
	err       error
}

// raiseMemoryAlarm raises the alarm and waits until the node lists it. The
// test's cleanup clears it whatever happens after the watermark is read,
// so a run that fails, even midway, never leaves the shared broker in
// alarm. The returned alarm is nil only when the watermark could not be
// read (nothing was changed).
func raiseMemoryAlarm(t *testing.T) (*memoryAlarm, error) {
	w, err := rabbitmqctl("eval", "vm_memory_monitor:get_vm_memory_high_watermark().")
	if err != nil {
		return nil, err
	}
	if _, err := watermarkArgs(w); err != nil {
		return nil, err
	}
	a := &memoryAlarm{watermark: w, raised: time.Now()}
	t.Cleanup(func() {
		if err := a.clear(); err != nil {
			t.Errorf("the broker may still be in a memory alarm: %v", err)
		}
	})
	if _, err := rabbitmqctl("set_vm_memory_high_watermark", "0.0000001"); err != nil {
		return a, err
	}
	if err := waitAlarm(true, 20*time.Second); err != nil {
		return a, err
	}
	a.took = time.Since(a.raised)
	return a, nil
}

// clear sets the node's own watermark back and waits until the alarm is
// gone, once.
func (a *memoryAlarm) clear() error {
	a.once.Do(func() {
		args, err := watermarkArgs(a.watermark)
		if err == nil {
			_, err = rabbitmqctl(append([]string{"set_vm_memory_high_watermark"}, args...)...)
		}
		if err == nil {
			err = waitAlarm(false, 20*time.Second)
		}
		if err != nil {
			a.err = fmt.Errorf("setting vm_memory_high_watermark back to %s: %w (scripts/stack.sh rabbitmqctl set_vm_memory_high_watermark ...)", a.watermark, err)
		}
	})
	return a.err
}

// watermarkArgs turns what get_vm_memory_high_watermark() prints (0.4, or
// {absolute,1073741824} when the node was given an absolute limit) into
// set_vm_memory_high_watermark's arguments.
func watermarkArgs(w string) ([]string, error) {
	if f, err := strconv.ParseFloat(w, 64); err == nil && f > 0 {
		return []string{w}, nil
	}
	if v, ok := strings.CutPrefix(w, "{absolute,"); ok {
		if n := strings.TrimSuffix(v, "}"); n != v {
			return []string{"absolute", n}, nil
		}
	}
	return nil, fmt.Errorf("vm_memory_high_watermark %q: neither a fraction nor {absolute,N}", w)
}

// waitAlarm waits until the node lists a memory alarm (on) or none.
func waitAlarm(on bool, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		alarms, err := rabbitmqctl("eval", "rabbit_alarm:get_alarms().")
		if err == nil && strings.Contains(alarms, "resource_limit,memory") == on {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("memory alarm on=%t not seen within %s (alarms: %s, %v)", on, within, alarms, err)
		}
		time.Sleep(200 * time.Millisecond) // polling the node
	}
}

// rabbitmqctl runs rabbitmqctl on the flavour's broker.
func rabbitmqctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.RepoPath("scripts/stack.sh"), append([]string{"rabbitmqctl", "-q"}, args...)...)
	cmd.Env = append(os.Environ(), "RELAY_TEST_FLAVOR="+testenv.Current.Name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// waitLogLine waits until a relay's log holds a line with text, and
// returns its message and fields but the level and the time (the relays
// log JSON).
func waitLogLine(log func() string, text string, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		for _, l := range strings.Split(log(), "\n") {
			if !strings.Contains(l, text) {
				continue
			}
			var f map[string]any
			if json.Unmarshal([]byte(l), &f) != nil {
				return strings.TrimSpace(l), nil
			}
			delete(f, "level")
			delete(f, "ts")
			b, _ := json.Marshal(f)
			return string(b), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no %q in its log within %s", text, within)
		}
		time.Sleep(50 * time.Millisecond) // polling the log file
	}
}

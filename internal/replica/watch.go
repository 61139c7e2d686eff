package replica

// The watch: the source replica's replication threads and the relay's delay
// behind the primary, polled beside the binlog path. Reported by /readyz
// (Reasons), the metrics (Metrics) and the sweeper (Stopped, Delay).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// PollEvery spaces the health reads: SHOW SLAVE STATUS on the source
// replica and one SHOW GLOBAL VARIABLES LIKE 'gtid_binlog_pos'
// ('gtid_executed') on the primary.
// Neither touches a table; the delay is measured to this resolution.
const PollEvery = 2 * time.Second

// maxPendingPositions bounds the primary positions kept while the relay is
// behind (one per poll that saw the primary move): past it the newest one
// is overwritten, so the oldest, which sets the delay, is kept.
const maxPendingPositions = 1024

// Watch polls the source replica's state and measures the relay's
// delay behind the primary. It runs beside the binlog path for the life of
// `run` (a standby too, for its /readyz); the primary is read only while
// this process streams. The zero Watch is ready to use.
type Watch struct {
	state     atomic.Pointer[State]
	stopped   atomic.Int64 // unix nanos since a thread has not been running; 0 when both run
	streaming atomic.Pointer[streamRef]

	mu       sync.Mutex
	measured bool     // the delay is measured (GTIDs on both ends, a relay streaming)
	pending  []seenAt // primary positions the relay had not streamed when read, oldest first
	lastErr  string   // last poll error logged, to log each once
	last     *State
	primary  seenAt // the primary's position as last read (LastPrimary)
}

type seenAt struct {
	pos string
	at  time.Time
}

// Stream is the binlog path as the watch sees it: its last saved
// checkpoint (*relay.Relay).
type Stream interface {
	LastCheckpoint() (checkpoint.Checkpoint, bool)
}

// streamRef is the binlog path running now and where it started.
type streamRef struct {
	r     Stream
	start binlog.Position
}

// streamed is the relay's position: its last saved checkpoint, or where it
// started before the first save.
func (s *streamRef) streamed() binlog.Position {
	if cp, ok := s.r.LastCheckpoint(); ok {
		return cp.Position()
	}
	return s.start
}

// StreamStarted records that this process streams now with r, from start
// (again after a restart of the binlog path). ended undoes it unless another
// start was recorded since.
func (w *Watch) StreamStarted(r Stream, start binlog.Position) (ended func()) {
	ref := &streamRef{r: r, start: start}
	w.streaming.Store(ref)
	return func() { w.streaming.CompareAndSwap(ref, nil) }
}

// Streaming reports whether this process streams now.
func (w *Watch) Streaming() bool { return w.streaming.Load() != nil }

// State is the source's replica state as last read; ok is false before the
// first read.
func (w *Watch) State() (st State, ok bool) {
	if p := w.state.Load(); p != nil {
		return *p, true
	}
	return State{}, false
}

// Stopped reports whether a replication thread of the source was not
// running at the last read.
func (w *Watch) Stopped() bool { return w.stopped.Load() != 0 }

// nothingPending reports that no primary position read earlier is still
// waiting to be streamed.
func (w *Watch) nothingPending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) == 0
}

// Poll reads the source replica's state and, while this process streams,
// the primary's position, once; errors are logged (each once), not
// returned.
func (w *Watch) Poll(ctx context.Context, s Servers, log *zap.Logger) {
	qctx, cancel := context.WithTimeout(ctx, PollEvery)
	defer cancel()
	st, err := ReadState(qctx, s.Source(), s.SourceAddr())
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		w.logOnce(log, "reading the source replica's state failed", err)
	} else {
		w.setState(log, st)
	}
	ref := w.streaming.Load()
	if ref == nil {
		w.mu.Lock()
		w.measured, w.pending = false, nil
		w.mu.Unlock()
		return
	}
	if err == nil && st.CaughtUp() && w.nothingPending() {
		// The replica has applied all it received and nothing is waiting
		// to be streamed: the primary is left alone, so a healthy idle
		// relay sends it nothing. A stopped thread, an error or a replica
		// falling behind starts the primary reads again, and the delay is
		// measured from there.
		return
	}
	flavor, err := s.Flavor(qctx)
	if err != nil {
		return
	}
	pos, err := PrimaryPosition(qctx, s.Primary(), flavor)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		// The primary cannot be read: nothing new is known, and the
		// positions already seen keep measuring the delay.
		w.logOnce(log, "reading the primary's position for the delay failed", err)
		return
	}
	w.observe(flavor, pos, ref.streamed(), time.Now())
}

// observe records the primary's position and drops the ones the relay has.
func (w *Watch) observe(flavor, primary string, streamed binlog.Position, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if primary != "" {
		w.primary = seenAt{primary, now}
	}
	if primary == "" || !streamed.HasGTID() {
		w.measured, w.pending = false, nil
		return
	}
	w.measured = true
	if n := len(w.pending); n == 0 || w.pending[n-1].pos != primary {
		if n >= maxPendingPositions {
			w.pending[n-1] = seenAt{primary, w.pending[n-1].at}
		} else {
			w.pending = append(w.pending, seenAt{primary, now})
		}
	}
	for len(w.pending) > 0 {
		ok, err := binlog.ContainsGTID(flavor, streamed.GTIDSet, w.pending[0].pos)
		if err != nil || !ok {
			break
		}
		w.pending = w.pending[1:]
	}
}

// LastPrimary is the primary's position as the watch last read it, and
// when; ok is false when it has not (it reads the primary only while this
// relay streams and the replica is not caught up).
func (w *Watch) LastPrimary() (pos string, at time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.primary.pos, w.primary.at, w.primary.pos != ""
}

// Delay is how long the oldest primary position the relay has not
// checkpointed yet has been seen on the primary; ok is false when it is
// not measured (no relay streaming, or GTIDs off).
func (w *Watch) Delay(now time.Time) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.measured {
		return 0, false
	}
	if len(w.pending) == 0 {
		return 0, true
	}
	return now.Sub(w.pending[0].at), true
}

func (w *Watch) setState(log *zap.Logger, st State) {
	w.state.Store(&st)
	if st.IsReplica && !st.Running() {
		w.stopped.CompareAndSwap(0, time.Now().UnixNano())
	} else {
		w.stopped.Store(0)
	}
	w.mu.Lock()
	prev := w.last
	w.last = &st
	w.lastErr = ""
	w.mu.Unlock()
	if !st.IsReplica || (prev != nil && prev.Threads() == st.Threads()) {
		return
	}
	if st.Running() {
		if prev != nil {
			log.Info("source replica is replicating again", zap.String("source", st.Addr), zap.String("replica_threads", st.Threads()))
		}
		return
	}
	log.Warn("source replica is not replicating: the relay reads nothing new from it; the sweeper sends rows after its grace period",
		zap.String("source", st.Addr), zap.String("master", st.Master), zap.String("replica_threads", st.Threads()), zap.String("fix", st.Fix()))
}

func (w *Watch) logOnce(log *zap.Logger, msg string, err error) {
	w.mu.Lock()
	same := w.lastErr == err.Error()
	w.lastErr = err.Error()
	w.mu.Unlock()
	if !same {
		log.Warn(msg, zap.Error(err))
	}
}

// Reasons are /readyz's reasons about the source replica: a thread
// not running, or the delay behind the primary, for longer than maxLag.
func (w *Watch) Reasons(s Servers, maxLag time.Duration) []string {
	st := w.state.Load()
	now := time.Now()
	var why []string
	threads := ""
	if st != nil && st.IsReplica {
		threads = " (" + st.Threads() + ")"
		if since := w.stopped.Load(); since != 0 && now.Sub(time.Unix(0, since)) > maxLag {
			why = append(why, fmt.Sprintf("source replica %s is not replicating for %s: %s; %s",
				st.Addr, now.Sub(time.Unix(0, since)).Round(time.Second), st.Threads(), st.Fix()))
			return why
		}
	}
	if w.streaming.Load() == nil {
		return nil
	}
	if d, ok := w.Delay(now); ok && d > maxLag {
		why = append(why, fmt.Sprintf("source %s is %s behind the primary %s (over http.ready_max_lag %s)%s",
			s.SourceAddr(), d.Round(time.Second), s.PrimaryAddr(), maxLag, threads))
	}
	return why
}

// Metrics is the watch as the replica-health metrics read it.
func (w *Watch) Metrics() metrics.Replica { return watchMetrics{w} }

// watchMetrics adapts the watch to metrics.Replica.
type watchMetrics struct{ w *Watch }

func (m watchMetrics) Threads() (io, sql, ok bool) {
	st := m.w.state.Load()
	if st == nil || !st.IsReplica {
		return false, false, false
	}
	return strings.EqualFold(st.IO, "Yes"), strings.EqualFold(st.SQL, "Yes"), true
}

func (m watchMetrics) Delay(now time.Time) (time.Duration, bool) {
	if m.w.streaming.Load() == nil {
		return 0, false
	}
	return m.w.Delay(now)
}

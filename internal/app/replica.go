package app

// Replica health: the source replica's replication threads and the relay's
// delay behind the primary, measured end to end (primary commit to the
// relay's checkpoint). Reported by check, status, /readyz and the metrics.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// replicaPollEvery spaces the health reads: SHOW SLAVE STATUS on the source
// replica and one SHOW GLOBAL VARIABLES LIKE 'gtid_binlog_pos'
// ('gtid_executed') on the primary.
// Neither touches a table; the delay is measured to this resolution.
const replicaPollEvery = 2 * time.Second

// maxPendingPositions bounds the primary positions kept while the relay is
// behind (one per poll that saw the primary move): past it the newest one
// is overwritten, so the oldest, which sets the delay, is kept.
const maxPendingPositions = 1024

// ReplicaState is what SHOW SLAVE STATUS (SHOW REPLICA STATUS) said about
// the source. IsReplica is false when the relay reads a primary directly.
type ReplicaState struct {
	Addr          string // the source, host:port
	IsReplica     bool
	Master        string // its primary, host:port
	IO, SQL       string // Slave_IO_Running, Slave_SQL_Running: Yes, No, Connecting
	IOError       string // Last_IO_Error
	SQLError      string // Last_SQL_Error
	SecondsBehind *int64 // Seconds_Behind_Master; nil when the server says NULL
	// Start is the statement this server takes to start replication:
	// START REPLICA where it names its columns Replica_* (MySQL 8.0.22+;
	// MySQL 9 has no START SLAVE), START SLAVE elsewhere (MariaDB, older
	// MySQL).
	Start string
}

// Running reports whether both threads run.
func (s ReplicaState) Running() bool {
	return strings.EqualFold(s.IO, "Yes") && strings.EqualFold(s.SQL, "Yes")
}

// CaughtUp reports a replica with both threads running, no error and
// nothing left to apply (Seconds_Behind_Master 0).
func (s ReplicaState) CaughtUp() bool {
	return s.IsReplica && s.Running() && s.IOError == "" && s.SQLError == "" && s.SecondsBehind != nil && *s.SecondsBehind == 0
}

// Threads describes the thread states and errors in one phrase.
func (s ReplicaState) Threads() string {
	out := fmt.Sprintf("IO thread %s, SQL thread %s", s.IO, s.SQL)
	if s.IOError != "" {
		out += fmt.Sprintf(", Last_IO_Error: %s", s.IOError)
	}
	if s.SQLError != "" {
		out += fmt.Sprintf(", Last_SQL_Error: %s", s.SQLError)
	}
	return out
}

// Fix says what to do about stopped threads, in the statement the server
// takes.
func (s ReplicaState) Fix() string {
	start := s.Start
	if start == "" {
		start = "START SLAVE"
	}
	if s.IOError != "" || s.SQLError != "" {
		return "fix the replication error on " + s.Addr + ", then " + start
	}
	return start + " on " + s.Addr
}

// readReplicaState reads SHOW REPLICA STATUS (MySQL 8.0.22+, MariaDB
// 10.5+), or SHOW SLAVE STATUS where the first is unknown (older MySQL;
// MySQL 9 knows only the first). Columns are read by name: MySQL 8.0.22+
// says Replica_IO_Running, Source_Host and Seconds_Behind_Source where
// MariaDB and older MySQL say Slave_IO_Running, Master_Host and
// Seconds_Behind_Master.
func readReplicaState(ctx context.Context, db *sql.DB, addr string) (ReplicaState, error) {
	st := ReplicaState{Addr: addr, Start: "START SLAVE"}
	rows, err := db.QueryContext(ctx, "SHOW REPLICA STATUS")
	if err != nil {
		var err2 error
		if rows, err2 = db.QueryContext(ctx, "SHOW SLAVE STATUS"); err2 != nil {
			return st, fmt.Errorf("reading SHOW REPLICA STATUS on %s: %w", addr, err)
		}
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return st, err
	}
	if !rows.Next() {
		return st, rows.Err()
	}
	raw := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return st, fmt.Errorf("reading SHOW REPLICA STATUS on %s: %w", addr, err)
	}
	col := map[string]sql.NullString{}
	for i, c := range cols {
		col[c] = raw[i]
	}
	get := func(names ...string) sql.NullString {
		for _, n := range names {
			if v, ok := col[n]; ok {
				return v
			}
		}
		return sql.NullString{}
	}
	st.IsReplica = true
	if _, ok := col["Replica_IO_Running"]; ok {
		st.Start = "START REPLICA"
	}
	st.IO = get("Slave_IO_Running", "Replica_IO_Running").String
	st.SQL = get("Slave_SQL_Running", "Replica_SQL_Running").String
	st.IOError = get("Last_IO_Error").String
	st.SQLError = get("Last_SQL_Error").String
	if h := get("Master_Host", "Source_Host").String; h != "" {
		st.Master = h + ":" + get("Master_Port", "Source_Port").String
	}
	if v := get("Seconds_Behind_Master", "Seconds_Behind_Source"); v.Valid {
		if n, err := strconv.ParseInt(v.String, 10, 64); err == nil {
			st.SecondsBehind = &n
		}
	}
	return st, nil
}

// gtidCovered reports whether position have includes every transaction of
// want. MariaDB positions are one GTID per domain and sequence numbers grow
// within a domain whichever server wrote them (a switchover changes the
// server id, not the order), so a domain is covered when have's sequence
// there is at least want's. MySQL positions are executed sets.
func gtidCovered(flavor, have, want string) (bool, error) {
	if flavor != binlog.FlavorMariaDB {
		return binlog.ContainsGTID(flavor, have, want)
	}
	h, err := mariadbDomains(have)
	if err != nil {
		return false, err
	}
	w, err := mariadbDomains(want)
	if err != nil {
		return false, err
	}
	for d, seq := range w {
		if h[d] < seq {
			return false, nil
		}
	}
	return true, nil
}

// mariadbDomains maps each domain of a MariaDB GTID list to its highest
// sequence number.
func mariadbDomains(s string) (map[uint64]uint64, error) {
	out := map[uint64]uint64{}
	for _, g := range strings.Split(s, ",") {
		g = strings.TrimSpace(g)
		if g == "" {
			continue
		}
		parts := strings.Split(g, "-")
		if len(parts) != 3 {
			return nil, fmt.Errorf("MariaDB GTID %q is not domain-server-sequence", g)
		}
		d, err1 := strconv.ParseUint(parts[0], 10, 32)
		seq, err2 := strconv.ParseUint(parts[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("MariaDB GTID %q is not domain-server-sequence", g)
		}
		out[d] = max(out[d], seq)
	}
	return out, nil
}

// replicaWatch polls the source replica's state and measures the relay's
// delay behind the primary. It runs beside the binlog path for the life of
// `run` (a standby too, for its /readyz); the primary is read only while
// this process streams.
type replicaWatch struct {
	state     atomic.Pointer[ReplicaState]
	stopped   atomic.Int64 // unix nanos since a thread has not been running; 0 when both run
	streaming atomic.Pointer[streamRef]
	// conflictLogged: a server_id conflict was logged (once per process).
	conflictLogged atomic.Bool

	mu       sync.Mutex
	measured bool     // the delay is measured (GTIDs on both ends, a relay streaming)
	pending  []seenAt // primary positions the relay had not streamed when read, oldest first
	lastErr  string   // last poll error logged, to log each once
	last     *ReplicaState
}

// nothingPending reports that no primary position read earlier is still
// waiting to be streamed.
func (w *replicaWatch) nothingPending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) == 0
}

type seenAt struct {
	pos string
	at  time.Time
}

// streamRef is the binlog path running now and where it started.
type streamRef struct {
	r     *relay.Relay
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

// replicaService polls replica health every replicaPollEvery.
func (a *App) replicaService() service {
	return func(ctx context.Context) error {
		a.Metrics().WatchReplica(replicaMetrics{a})
		tick := time.NewTicker(replicaPollEvery)
		defer tick.Stop()
		for {
			a.pollReplica(ctx)
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
	}
}

func (a *App) pollReplica(ctx context.Context) {
	w := &a.replica
	qctx, cancel := context.WithTimeout(ctx, replicaPollEvery)
	defer cancel()
	st, err := readReplicaState(qctx, a.Source, a.sourceAddr())
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		w.logOnce(a.Log, "reading the source replica's state failed", err)
	} else {
		w.setState(a.Log, st)
	}
	a.watchServerID(qctx)
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
	flavor, err := a.Flavor(qctx)
	if err != nil {
		return
	}
	pos, err := a.primaryPosition(qctx, flavor)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		// The primary cannot be read: nothing new is known, and the
		// positions already seen keep measuring the delay.
		w.logOnce(a.Log, "reading the primary's position for the delay failed", err)
		return
	}
	w.observe(flavor, pos, ref.streamed(), time.Now())
}

// watchServerID looks, while the binlog stream is down, for another
// replica registered on the source with this relay's source.server_id: the
// source refuses or drops a second stream with one id (MariaDB: error 4052
// or 1236), so the reader would reconnect in vain. It is named on /readyz
// and logged; the reader keeps retrying from its position, never ahead.
func (a *App) watchServerID(ctx context.Context) {
	r := a.ops.reader.Load()
	if r == nil || r.Connected() || a.Cfg.Source.ServerID == 0 || a.replica.streaming.Load() == nil {
		return
	}
	others, err := a.serverIDs().Registered(ctx)
	if err != nil || len(others) == 0 {
		return
	}
	hint := a.serverIDs().Hint()
	a.notice.Set("binlog stream from "+a.sourceAddr()+" is refused: "+hint, 2*replicaPollEvery+time.Second)
	if a.replica.conflictLogged.CompareAndSwap(false, true) {
		a.Log.Error("binlog stream refused by the source: another replica is connected with this relay's server_id. The reader retries from its position; nothing is skipped",
			zap.Uint32("server_id", a.Cfg.Source.ServerID), zap.Strings("registered_as", others), zap.String("fix", hint))
	}
}

// observe records the primary's position and drops the ones the relay has.
func (w *replicaWatch) observe(flavor, primary string, streamed binlog.Position, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
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
		ok, err := gtidCovered(flavor, streamed.GTIDSet, w.pending[0].pos)
		if err != nil || !ok {
			break
		}
		w.pending = w.pending[1:]
	}
}

// Delay is how long the oldest primary position the relay has not
// checkpointed yet has been seen on the primary; ok is false when it is
// not measured (no relay streaming, or GTIDs off).
func (w *replicaWatch) Delay(now time.Time) (time.Duration, bool) {
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

func (w *replicaWatch) setState(log *zap.Logger, st ReplicaState) {
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

func (w *replicaWatch) logOnce(log *zap.Logger, msg string, err error) {
	w.mu.Lock()
	same := w.lastErr == err.Error()
	w.lastErr = err.Error()
	w.mu.Unlock()
	if !same {
		log.Warn(msg, zap.Error(err))
	}
}

// replicaReasons are /readyz's reasons about the source replica: a thread
// not running, or the delay behind the primary, for longer than maxLag.
func (a *App) replicaReasons(maxLag time.Duration) []string {
	w := &a.replica
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
			a.sourceAddr(), d.Round(time.Second), a.Cfg.Primary.Addr(), maxLag, threads))
	}
	return why
}

// replicaStatus prints the source replica's threads and whether the
// checkpoint has everything the primary has (`status`). asked is whether
// it read the primary (it needs the source's flavor to), err the primary's
// error then.
func (a *App) replicaStatus(ctx context.Context, w io.Writer, cp checkpoint.Checkpoint, haveCP bool) (asked bool, err error) {
	st, err := readReplicaState(ctx, a.Source, a.sourceAddr())
	switch {
	case err != nil:
		fmt.Fprintf(w, "replica      %v\n", err)
	case st.IsReplica:
		behind := "unknown (NULL)"
		if st.SecondsBehind != nil {
			behind = fmt.Sprintf("%ds", *st.SecondsBehind)
		}
		fmt.Fprintf(w, "replica      %s replicating from %s: %s; Seconds_Behind_Master %s\n", st.Addr, st.Master, st.Threads(), behind)
		if !st.Running() {
			fmt.Fprintf(w, "             fix: %s\n", st.Fix())
		}
	default:
		fmt.Fprintf(w, "replica      %s is not a replica (the relay reads a primary)\n", st.Addr)
	}
	flavor, err := a.Flavor(ctx)
	if err != nil {
		return false, nil
	}
	pos, err := a.primaryPosition(ctx, flavor)
	switch {
	case err != nil:
		fmt.Fprintf(w, "primary      %s: %v\n", a.Cfg.Primary.Addr(), err)
		return true, err
	case pos == "":
		fmt.Fprintf(w, "primary      %s has no GTID position: the delay behind it is not measured\n", a.Cfg.Primary.Addr())
	case !haveCP || cp.GTIDSet == "":
		fmt.Fprintf(w, "primary      %s at %s\n", a.Cfg.Primary.Addr(), pos)
	default:
		ok, err := gtidCovered(flavor, cp.GTIDSet, pos)
		switch {
		case err != nil:
			fmt.Fprintf(w, "primary      %s at %s (cannot compare with the checkpoint: %v)\n", a.Cfg.Primary.Addr(), pos, err)
		case ok:
			fmt.Fprintf(w, "primary      %s at %s: the checkpoint has all of it\n", a.Cfg.Primary.Addr(), pos)
		default:
			fmt.Fprintf(w, "primary      %s at %s: the checkpoint is behind it (the relay or its replica has not caught up)\n", a.Cfg.Primary.Addr(), pos)
		}
	}
	return true, nil
}

// checkReplica reports stopped replication threads and errors on the
// source replica (a warning: the relay starts, reads what arrives, and the
// sweeper covers the rest).
func (c *checker) checkReplica(ctx context.Context) {
	a := c.a
	st, err := readReplicaState(ctx, a.Source, a.sourceAddr())
	where := "source " + a.sourceAddr()
	if err != nil {
		c.add(Warning, where, "cannot read its replica status: %v", err)
		return
	}
	if !st.IsReplica {
		return
	}
	if !st.Running() {
		c.add(Warning, where, "the source replica is not replicating from %s (%s): %s; until then the relay reads nothing new and the sweeper sends rows after sweeper.grace_period",
			st.Master, st.Threads(), st.Fix())
		return
	}
	if st.SecondsBehind != nil && time.Duration(*st.SecondsBehind)*time.Second > a.Cfg.HTTP.ReadyMaxLag {
		c.add(Warning, where, "the source replica is %ds behind its primary %s (over http.ready_max_lag %s)", *st.SecondsBehind, st.Master, a.Cfg.HTTP.ReadyMaxLag)
	}
}

// replicaMetrics adapts the watch to metrics.Replica.
type replicaMetrics struct{ a *App }

func (m replicaMetrics) Threads() (io, sql, ok bool) {
	st := m.a.replica.state.Load()
	if st == nil || !st.IsReplica {
		return false, false, false
	}
	return strings.EqualFold(st.IO, "Yes"), strings.EqualFold(st.SQL, "Yes"), true
}

func (m replicaMetrics) Delay(now time.Time) (time.Duration, bool) {
	if m.a.replica.streaming.Load() == nil {
		return 0, false
	}
	return m.a.replica.Delay(now)
}

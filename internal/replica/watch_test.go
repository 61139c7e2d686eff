package replica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// The delay is the age of the oldest primary position the relay has not
// checkpointed; it drops to zero once the relay has it.
func TestDelayFollowsUnstreamedPositions(t *testing.T) {
	var w Watch
	t0 := time.Unix(1000, 0)
	streamed := binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-10"}
	if _, ok := w.Delay(t0); ok {
		t.Fatal("delay measured before any observation")
	}
	w.observe(binlog.FlavorMariaDB, "0-1-10", streamed, t0)
	if d, ok := w.Delay(t0.Add(5 * time.Second)); !ok || d != 0 {
		t.Fatalf("caught up: delay %v, %v", d, ok)
	}
	// The primary moves; the relay does not (a stopped SQL thread).
	w.observe(binlog.FlavorMariaDB, "0-1-11", streamed, t0.Add(2*time.Second))
	w.observe(binlog.FlavorMariaDB, "0-1-12", streamed, t0.Add(4*time.Second))
	if d, _ := w.Delay(t0.Add(10 * time.Second)); d != 8*time.Second {
		t.Fatalf("delay %v, want 8s (since 0-1-11 was seen)", d)
	}
	// The relay has 0-1-11: the delay is now from 0-1-12.
	w.observe(binlog.FlavorMariaDB, "0-1-12", binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-11"}, t0.Add(10*time.Second))
	if d, _ := w.Delay(t0.Add(10 * time.Second)); d != 6*time.Second {
		t.Fatalf("delay %v, want 6s", d)
	}
	w.observe(binlog.FlavorMariaDB, "0-1-12", binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-12"}, t0.Add(11*time.Second))
	if d, ok := w.Delay(t0.Add(11 * time.Second)); !ok || d != 0 {
		t.Fatalf("caught up again: delay %v, %v", d, ok)
	}
	// Without GTIDs the delay is not measured.
	w.observe(binlog.FlavorMySQL, "", binlog.Position{Flavor: binlog.FlavorMySQL, File: "b.1", Pos: 4}, t0)
	if _, ok := w.Delay(t0); ok {
		t.Fatal("delay measured without GTIDs")
	}
	// The list is bounded; the oldest position keeps setting the delay.
	for i := range 3 * maxPendingPositions {
		w.observe(binlog.FlavorMariaDB, fmt.Sprintf("0-1-%d", 100+i), streamed, t0.Add(time.Duration(i)*time.Second))
	}
	if len(w.pending) > maxPendingPositions {
		t.Fatalf("%d pending positions kept", len(w.pending))
	}
	if d, _ := w.Delay(t0.Add(time.Hour)); d != time.Hour {
		t.Fatalf("delay %v after many positions, want 1h", d)
	}
}

// A switchover on the primary changes the server id in its position, not
// the order: a position the relay has under the old server id is not
// pending, one past it is.
func TestDelayAcrossASwitchover(t *testing.T) {
	var w Watch
	t0 := time.Unix(1000, 0)
	streamed := binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-11-100,1-11-7"}
	w.observe(binlog.FlavorMariaDB, "0-13-100,1-13-7", streamed, t0)
	if d, ok := w.Delay(t0.Add(time.Minute)); !ok || d != 0 || !w.nothingPending() {
		t.Fatalf("the relay has the new primary's position under the old server id: delay %v, %v", d, ok)
	}
	w.observe(binlog.FlavorMariaDB, "0-13-101,1-13-7", streamed, t0.Add(time.Second))
	if d, _ := w.Delay(t0.Add(time.Minute)); d != time.Minute-time.Second || w.nothingPending() {
		t.Fatalf("delay %v, want 59s (0-13-101 not streamed)", d)
	}
	// A domain the relay never streamed keeps the position pending.
	w.observe(binlog.FlavorMariaDB, "0-13-101,2-13-1", binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-13-200,1-13-7"}, t0.Add(2*time.Second))
	if d, _ := w.Delay(t0.Add(time.Minute)); d != time.Minute-2*time.Second {
		t.Fatalf("delay %v, want 58s (domain 2 not streamed)", d)
	}
}

// servers is a source replica and a primary, fake when given.
type servers struct{ source, primary *sql.DB }

func (s servers) Source() *sql.DB   { return s.source }
func (servers) SourceAddr() string  { return "replica1:3307" }
func (s servers) Primary() *sql.DB  { return s.primary }
func (servers) PrimaryAddr() string { return "primary:3306" }

func (servers) Flavor(context.Context) (string, error) { return binlog.FlavorMariaDB, nil }

// A caught-up replica leaves the primary alone; one that falls behind
// starts the primary reads, and the delay is measured from there.
func TestPollReadsThePrimaryOnlyWhenBehind(t *testing.T) {
	source := &statusServer{cols: []string{"Master_Host", "Master_Port", "Slave_IO_Running", "Slave_SQL_Running", "Seconds_Behind_Master"},
		row: []driver.Value{"primary", "3306", "Yes", "Yes", "0"}}
	primary := &statusServer{gtid: "0-1-11"}
	s := servers{sql.OpenDB(source), sql.OpenDB(primary)}
	defer s.source.Close()
	defer s.primary.Close()
	ctx := context.Background()
	var w Watch
	w.Poll(ctx, s, zap.NewNop())
	if st, ok := w.State(); !ok || st.Addr != "replica1:3307" || !st.CaughtUp() {
		t.Fatalf("state %+v, %v", st, ok)
	}
	if _, ok := w.Delay(time.Now()); ok || primary.gtidReads.Load() != 0 {
		t.Fatal("the primary was read while nothing streams")
	}
	cp := &checkpoint.Checkpoint{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-10"}
	defer w.StreamStarted(stream{cp}, binlog.Position{})()
	w.Poll(ctx, s, zap.NewNop())
	if primary.gtidReads.Load() != 0 {
		t.Fatal("the primary was read while the replica is caught up")
	}
	source.row[4] = "5"
	w.Poll(ctx, s, zap.NewNop())
	if d, ok := w.Delay(time.Now()); !ok || d > time.Second || primary.gtidReads.Load() != 1 || w.nothingPending() {
		t.Fatalf("behind: delay %v, %v after %d primary reads", d, ok, primary.gtidReads.Load())
	}
	cp.GTIDSet = "0-1-11"
	w.Poll(ctx, s, zap.NewNop())
	if d, ok := w.Delay(time.Now()); !ok || d != 0 {
		t.Fatalf("streamed the primary's position: delay %v, %v", d, ok)
	}
}

type stream struct{ cp *checkpoint.Checkpoint }

func (s stream) LastCheckpoint() (checkpoint.Checkpoint, bool) {
	if s.cp == nil {
		return checkpoint.Checkpoint{}, false
	}
	return *s.cp, true
}

// /readyz names a replica that has not replicated for longer than
// ready_max_lag, with the statement that restarts it.
func TestReasonsStoppedReplica(t *testing.T) {
	var w Watch
	core, logs := observer.New(zap.InfoLevel)
	st := State{Addr: "replica1:3307", IsReplica: true, Master: "primary:3306", IO: "Yes", SQL: "No",
		SQLError: "Duplicate entry '7'", Start: "START REPLICA"}
	w.setState(zap.New(core), st)
	if !w.Stopped() {
		t.Fatal("a stopped SQL thread is not Stopped")
	}
	if logs.FilterMessageSnippet("source replica is not replicating").Len() != 1 {
		t.Fatalf("want one warning, got %v", logs.All())
	}
	if why := w.Reasons(servers{}, time.Minute); len(why) != 0 {
		t.Fatalf("stopped for less than ready_max_lag: %q", why)
	}
	w.stopped.Store(time.Now().Add(-90 * time.Second).UnixNano())
	why := w.Reasons(servers{}, time.Minute)
	want := "source replica replica1:3307 is not replicating for 1m30s: IO thread Yes, SQL thread No, Last_SQL_Error: Duplicate entry '7'; " +
		"fix the replication error on replica1:3307, then START REPLICA"
	if len(why) != 1 || why[0] != want {
		t.Fatalf("reasons %q, want %q", why, want)
	}
	if io, sql, ok := w.Metrics().Threads(); !ok || !io || sql {
		t.Fatalf("metrics threads io=%v sql=%v ok=%v", io, sql, ok)
	}
	// Replicating again: nothing to say, and it is logged once.
	st.SQL, st.SQLError = "Yes", ""
	w.setState(zap.New(core), st)
	w.setState(zap.New(core), st)
	if w.Stopped() || len(w.Reasons(servers{}, time.Minute)) != 0 {
		t.Fatalf("replicating again: stopped %v, reasons %q", w.Stopped(), w.Reasons(servers{}, time.Minute))
	}
	if logs.FilterMessageSnippet("replicating again").Len() != 1 {
		t.Fatalf("want one info line, got %v", logs.All())
	}
}

// /readyz names the source's delay behind the primary once it is over
// ready_max_lag, but only while this process streams.
func TestReasonsDelayOverMaxLag(t *testing.T) {
	var w Watch
	st := State{Addr: "replica1:3307", IsReplica: true, Master: "primary:3306", IO: "Yes", SQL: "Yes", Start: "START SLAVE"}
	w.setState(zap.NewNop(), st)
	now := time.Now()
	cp := &checkpoint.Checkpoint{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-10"}
	w.observe(binlog.FlavorMariaDB, "0-1-11", cp.Position(), now.Add(-2*time.Minute))
	if why := w.Reasons(servers{}, time.Minute); len(why) != 0 {
		t.Fatalf("not streaming: %q", why)
	}
	if _, ok := w.Metrics().Delay(now); ok {
		t.Fatal("the metrics measure a delay while nothing streams")
	}
	ended := w.StreamStarted(stream{cp}, binlog.Position{})
	if !w.Streaming() {
		t.Fatal("not streaming after StreamStarted")
	}
	why := w.Reasons(servers{}, time.Minute)
	want := "source replica1:3307 is 2m0s behind the primary primary:3306 (over http.ready_max_lag 1m0s) (IO thread Yes, SQL thread Yes)"
	if len(why) != 1 || why[0] != want {
		t.Fatalf("reasons %q, want %q", why, want)
	}
	if d, ok := w.Metrics().Delay(now); !ok || d < 2*time.Minute-time.Second {
		t.Fatalf("metrics delay %v, %v", d, ok)
	}
	if why := w.Reasons(servers{}, 3*time.Minute); len(why) != 0 {
		t.Fatalf("under ready_max_lag: %q", why)
	}
	// A restart of the binlog path replaces the stream; the first one
	// ending then leaves it alone.
	again := w.StreamStarted(stream{}, cp.Position())
	ended()
	if !w.Streaming() {
		t.Fatal("an older stream's end cleared the current one")
	}
	again()
	if w.Streaming() {
		t.Fatal("streaming after the stream ended")
	}
}

func TestStreamedPosition(t *testing.T) {
	start := binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-5"}
	if p := (&streamRef{r: stream{}, start: start}).streamed(); p != start {
		t.Fatalf("before a save: %+v, want the start", p)
	}
	cp := &checkpoint.Checkpoint{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-9"}
	if p := (&streamRef{r: stream{cp}, start: start}).streamed(); p.GTIDSet != "0-1-9" {
		t.Fatalf("after a save: %+v, want the checkpoint", p)
	}
}

func TestLogOnce(t *testing.T) {
	var w Watch
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)
	for _, e := range []string{"a", "a", "b", "a"} {
		w.logOnce(log, "reading failed", errors.New(e))
	}
	if n := logs.Len(); n != 3 {
		t.Fatalf("%d lines, want 3 (a, b, a)", n)
	}
}

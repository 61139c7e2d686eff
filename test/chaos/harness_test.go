package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

var (
	randomFor    = flag.Duration("chaos.random", 0, "run random schedules for this long (make chaos: CHAOS_DURATION, split between the flavours)")
	seedFlag     = flag.Uint64("chaos.seed", 0, "replay the schedule of this seed (with -chaos.config and -chaos.profile; make chaos SEED=...)")
	configFlag   = flag.String("chaos.config", "", "the configuration of -chaos.seed, relaxed/queue/status and the like (empty: every one)")
	profileFlag  = flag.String("chaos.profile", "long", "the profile of -chaos.seed and -chaos.random: short (make test's) or long")
	scenarioFlag = flag.String("chaos.scenario", "", "run the named scenarios matching this (all: every one; make chaos SCENARIO=...)")
	splitFlag    = flag.Int("chaos.split", 1, "take 1/N of -chaos.random (make chaos runs N flavours one after another)")
	keepFlag     = flag.Bool("chaos.keep", false, "write the artifacts of every schedule, passed or not")
	outFlag      = flag.String("chaos.out", "", "also append each schedule's line and the summary to this file (make chaos prints them at the end)")
)

// out prints a line of the run's summary, to stdout and to -chaos.out.
func out(s string) {
	fmt.Print(s)
	if *outFlag == "" {
		return
	}
	f, err := os.OpenFile(*outFlag, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "-chaos.out: %v\n", err)
		return
	}
	defer f.Close()
	_, _ = f.WriteString(s)
}

// fixed are the schedules make test runs on every flavour: short, drawn
// from these seeds. Together they draw every fault the suite ran before it
// had a harness (a relay killed and restarted, the leader killed and a
// standby taking over, the broker's connections cut, Redis restarted and
// cut off, the source replica failing over), on three configurations;
// TestFixedSeedsCover keeps it so.
var fixed = []struct {
	seed   uint64
	config string
}{
	{1, "relaxed/queue/status"},
	{17, "lanes4/stream/statusless"},
	{34, "strict/queue/status"},
}

// TestChaosSchedules runs the fixed schedules (make test).
func TestChaosSchedules(t *testing.T) {
	testenv.Integration(t)
	testenv.LockHeavy(t)
	sum := newSummary()
	for _, f := range fixed {
		c, err := ParseConfig(f.config)
		if err != nil {
			t.Fatal(err)
		}
		s := Draw(f.seed, c, shortProfile, testenv.Current.Name)
		t.Run(fmt.Sprintf("seed%d-%s", f.seed, strings.ReplaceAll(f.config, "/", "-")), func(t *testing.T) {
			sum.add(runSchedule(t, s))
		})
	}
	out(sum.table())
}

// TestChaosReplay runs one schedule again: make chaos SEED=... [CONFIG=...]
// [PROFILE=...].
func TestChaosReplay(t *testing.T) {
	testenv.Integration(t)
	if *seedFlag == 0 {
		t.Skip("replays a schedule: -chaos.seed N [-chaos.config C] [-chaos.profile short|long] (make chaos SEED=N)")
	}
	testenv.LockHeavy(t)
	p := profileOf(t)
	p.Rabbit = *rabbitCluster // as make chaos drew it
	configs := Matrix()
	if *configFlag != "" {
		c, err := ParseConfig(*configFlag)
		if err != nil {
			t.Fatal(err)
		}
		configs = []Config{c}
	}
	sum := newSummary()
	for _, c := range configs {
		s := Draw(*seedFlag, c, p, testenv.Current.Name)
		t.Run(strings.ReplaceAll(c.String(), "/", "-"), func(t *testing.T) { sum.add(runSchedule(t, s)) })
	}
	out(sum.table())
}

// TestChaosRandom runs random schedules for -chaos.random (make chaos), the
// configurations in turn (shuffled), each with a seed of its own, and
// prints one line per schedule and a summary.
func TestChaosRandom(t *testing.T) {
	testenv.Integration(t)
	if *randomFor <= 0 {
		t.Skip("runs random schedules for a while: -chaos.random 15m (make chaos)")
	}
	testenv.LockHeavy(t)
	p := profileOf(t)
	p.Rabbit = *rabbitCluster
	deadline := time.Now().Add(*randomFor / time.Duration(max(*splitFlag, 1)))
	sum := newSummary()
	var order []Config
	for i := 0; time.Until(deadline) > 90*time.Second; i++ {
		if len(order) == 0 {
			order = Matrix()
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		c := order[0]
		order = order[1:]
		// A schedule that fits in the time left (each draw is replayed
		// whole by its seed: none is cut short).
		left := time.Until(deadline) - 60*time.Second
		s := Draw(rand.Uint64N(1<<48)+1, c, p, testenv.Current.Name)
		for try := 0; s.Duration > left && try < 50; try++ {
			s = Draw(rand.Uint64N(1<<48)+1, c, p, testenv.Current.Name)
		}
		if s.Duration > left {
			break
		}
		t.Run(fmt.Sprintf("%d-seed%d", i, s.Seed), func(t *testing.T) { sum.add(runSchedule(t, s)) })
	}
	out(sum.table())
}

func profileOf(t *testing.T) Profile {
	switch *profileFlag {
	case "short":
		return shortProfile
	case "long":
		return longProfile
	}
	t.Fatalf("-chaos.profile %q: short or long", *profileFlag)
	return Profile{}
}

// result is one schedule's outcome.
type result struct {
	s         Schedule
	r         *Report
	rows      int // row versions committed to deliver
	errs      []string
	artifacts string
	took      time.Duration
}

func (r *result) ok() bool { return len(r.errs) == 0 && r.r.OK() }

// line is the one-line summary of a schedule.
func (r *result) line() string {
	verdict := "ok"
	if !r.ok() {
		verdict = "FAILED"
	}
	var dups []string
	for _, k := range sortedKeys(r.r.Duplicates) {
		if d := r.r.Duplicates[k]; d.Dups > 0 {
			dups = append(dups, fmt.Sprintf("%s %d/%d", k, d.Dups, d.Bound))
		}
	}
	return fmt.Sprintf("%s seed=%d config=%s flavour=%s relays=%d redis=%s broker=%s %s rate=%d faults=[%s] committed=%d delivered=%d lost=%d dups=%d [%s] order=%d drafts=%d pending=%d failed=%d %s in %s",
		cmpOr(r.s.Name, "schedule"), r.s.Seed, r.s.Config, r.s.Flavor, r.s.Relays, r.s.Redis, r.s.Broker, r.s.Duration, r.s.Traffic.Rate,
		r.s.FaultNames(), r.rows, r.r.Deliveries, len(r.r.Lost), r.r.TotalDuplicates(), strings.Join(dups, ", "),
		len(r.r.Order), len(r.r.Drafts), len(r.r.Pending), len(r.r.Failed), verdict, r.took.Round(time.Second))
}

// runSchedule runs one schedule and checks its history: the relays start,
// the writer writes, the faults come one by one, the writer stops, the
// relays drain, and the checker reads what happened. A failed check writes
// the history out (artifacts) and fails t.
func runSchedule(t *testing.T, s Schedule) *result {
	began := time.Now()
	t.Logf("schedule: %s\n  replay: %s", describe(s), s.Replay())
	e := newEnv(t, &s)
	res := &result{s: s}
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		res.errs = append(res.errs, msg)
		e.note("ERROR %s", msg)
	}
	e.writeConfigs()
	e.startRelay(0)
	e.waitStarted(0)
	for i := 1; i < len(e.relays); i++ {
		e.startRelay(i)
	}
	if _, err := e.waitLeader(-1, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	q := startQueueConsumer(e)
	var sc *streamConsumer
	if s.Config.Stream {
		sc = startStreamConsumer(e)
	}
	e.start = time.Now()
	e.rec.h.Start = e.start
	e.writer = startWriter(e)
	e.note("writer starts: %d rows/s", s.Traffic.Rate)

	for _, p := range s.Faults {
		if wait := time.Until(e.start.Add(p.At)); wait > 0 {
			time.Sleep(wait) // the schedule: faults at their drawn times
		}
		f := byName(p.Kind)
		st := &state{}
		ev := FaultEvent{Kind: p.Kind, Start: time.Now(), Bound: f.Bound(&s, p)}
		detail, err := f.Inject(e, p, st)
		if err != nil {
			fail("injecting %s: %v", p.Kind, err)
		} else if p.Hold > 0 {
			time.Sleep(p.Hold) // the fault lasts
		}
		more, rerr := f.Recover(e, p, st)
		ev.End = time.Now()
		ev.Detail = strings.TrimSuffix(detail+"; "+more, "; ")
		e.rec.fault(ev)
		e.note("%s from %.1fs for %.1fs: %s", p.Kind, ev.Start.Sub(e.start).Seconds(), ev.End.Sub(ev.Start).Seconds(), ev.Detail)
		if rerr != nil {
			fail("recovering from %s: %v", p.Kind, rerr)
		}
		if err != nil || rerr != nil {
			break
		}
	}
	if wait := time.Until(e.start.Add(s.Duration)); wait > 0 {
		time.Sleep(wait)
	}
	e.writer.halt()
	txs, werrs, lastErr := e.writer.history()
	e.note("writer stopped: %d transactions (%d statements failed; last: %s)", len(txs), werrs, lastErr)

	ctx := context.Background()
	live, archives := e.tables()
	if err := resolve(ctx, e.db, txs, append(live, archives...), s.Config.Status()); err != nil {
		fail("settling the transactions whose commit went unanswered: %v", err)
	}
	if err := e.drain(txs, 90*time.Second+s.Duration/4); err != nil {
		fail("%v", err)
	}
	if err := q.barrier(60 * time.Second); err != nil {
		fail("%v", err)
	}
	if sc != nil {
		if err := sc.barrier(60 * time.Second); err != nil {
			fail("%v", err)
		}
	}
	// Every row is SENT: the leader holds none confirmed and unmarked.
	if l, err := e.waitLeader(-1, 30*time.Second); err != nil {
		fail("no leader after the drain: %v", err)
	} else if n, ok := e.unmarkedSettles(l, 10*time.Second); !ok {
		fail("the leader (relay %d) still counts binlog_relay_unmarked_rows %s 10 s after every row was SENT", l, n)
	}
	end, err := e.endState()
	if err != nil {
		fail("reading the tables: %v", err)
	}
	e.rec.mu.Lock()
	e.rec.h.Txs = txs
	e.rec.h.End = end
	e.rec.h.Table, e.rec.h.Tenants = live[0], live[1:]
	e.mu.Lock()
	for _, w := range e.woken {
		w.Publishes = e.relays[w.Relay].publishedBetween(w.At, w.Until)
		e.rec.h.Woken = append(e.rec.h.Woken, w)
	}
	e.mu.Unlock()
	h := e.rec.h
	h.Deliveries = append([]Delivery(nil), h.Deliveries...)
	h.Journal = append([]string(nil), h.Journal...)
	e.rec.mu.Unlock()
	res.r = Check(&h)
	res.rows = res.r.Committed
	res.took = time.Since(began)
	if !res.ok() || *keepFlag {
		res.artifacts = writeArtifacts(t, e, &h, res)
	}
	if !res.ok() {
		for _, p := range res.r.Problems() {
			t.Errorf("%s", p)
		}
		for _, m := range res.errs {
			t.Errorf("%s", m)
		}
		t.Errorf("history and report kept in %s\n  replay: %s", res.artifacts, s.Replay())
	}
	out(res.line() + "\n")
	return res
}

// describe is a schedule in one paragraph.
func describe(s Schedule) string {
	return fmt.Sprintf("seed %d, %s on %s, profile %s, %d relays, Redis %s, broker %s, %s at %d rows/s, traffic %+v, faults %s",
		s.Seed, s.Config, s.Flavor, s.Profile.Name, s.Relays, s.Redis, s.Broker, s.Duration, s.Traffic.Rate, s.Traffic, s.FaultNames())
}

// drain waits until every row version committed to deliver was delivered
// as committed and no row of a status table is left PENDING or SENDING
// (the sweeper's grace period is 60 s: a row the relays left behind gets
// its chance), or within has passed; what is still missing then is for the
// checker to name.
func (e *env) drain(txs []Tx, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		got := e.rec.delivered()
		missing := 0
		for _, tx := range txs {
			if tx.Outcome != Committed {
				continue
			}
			for _, r := range tx.Rows {
				if r.Expect == Deliver && !got[r.ID][normalize(r.Body)] {
					missing++
				}
			}
		}
		pending := 0
		if e.s.Config.Status() {
			live, archives := e.tables()
			for i, table := range append(live, archives...) {
				var n int
				// Rows re-queued for hours on are the sweeper's then; the
				// retries of rows archived away are nobody's (documented).
				q := fmt.Sprintf("SELECT COUNT(*) FROM `%s` WHERE status IN ('PENDING', 'SENDING') "+
					"AND (next_retry_time IS NULL OR next_retry_time < NOW(3) + INTERVAL 1 HOUR)", table)
				if i >= len(live) {
					q += " AND error_msg IS NULL"
				}
				if err := e.db.QueryRow(q).Scan(&n); err != nil {
					return fmt.Errorf("counting pending rows of %s: %w", table, err)
				}
				pending += n
			}
		}
		if missing == 0 && pending == 0 {
			e.note("drained")
			return nil
		}
		if time.Now().After(deadline) {
			e.note("after %s of drain: %d row versions not delivered, %d rows PENDING or SENDING", within, missing, pending)
			return nil
		}
		time.Sleep(500 * time.Millisecond) // polling the consumers and the tables
	}
}

// endState reads every row of the status table and its archives.
func (e *env) endState() (map[string]EndRow, error) {
	out := map[string]EndRow{}
	if !e.s.Config.Status() {
		return out, nil
	}
	live, archives := e.tables()
	for _, table := range append(archives, live...) { // the live tables last: their rows win
		rows, err := e.db.Query(fmt.Sprintf("SELECT message_id, status, COALESCE(error_msg, '') FROM `%s`", table))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			r := EndRow{Table: table}
			if err := rows.Scan(&id, &r.Status, &r.Error); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = r
		}
		rows.Close()
	}
	return out, nil
}

func init() {
	if v := os.Getenv("CHAOS_ARTIFACTS"); v != "" {
		artifactsDir = v
	}
}

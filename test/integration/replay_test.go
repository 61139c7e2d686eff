package integration

// `binlog-relay replay` end to end: SENT rows (and archived ones) read from
// the replica and published again, in primary-key order, with the replay
// header, to a side exchange; never a statement to the primary (its address
// in the config is a counting proxy that must see no connection and no
// command), a bounded number to the replica, never a status changed;
// interrupted with SIGINT and resumed without a duplicate; and the
// ranges it refuses, with exit code 2.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/command"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/replay"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// replayNumbers is a derived table of 0..99999 (no recursive CTE: MySQL
// caps its depth at 1000).
const replayNumbers = "(SELECT a.d + 10*b.d + 100*c.d + 1000*d.d + 10000*e.d AS n FROM %[1]s a, %[1]s b, %[1]s c, %[1]s d, %[1]s e) s"

const replayDigit = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"

// insertSent writes n rows with ids from+1..from+n into table on the
// primary, SENT an hour ago, message ids prefix-<id>, routing keys
// alternating order.created / order.paid, to an exchange no queue is bound
// to (the original destination, which a replay to a side exchange must not
// use).
func insertSent(t *testing.T, db *testenv.DB, table, prefix string, from, n int) {
	t.Helper()
	numbers := fmt.Sprintf(replayNumbers, replayDigit)
	db.Exec(t, `INSERT INTO `+table+` (id, message_id, exchange, routing_key, content, status, create_time, update_time)
		SELECT ? + n + 1, CONCAT(?, ? + n + 1), 'orders.original', IF(n % 2 = 0, 'order.created', 'order.paid'),
			CONCAT('{"n":', ? + n + 1, '}'), 'SENT', NOW(3) - INTERVAL 1 HOUR, NOW(3) - INTERVAL 50 MINUTE FROM `+numbers+` WHERE n < ?`,
		from, prefix+"-", from, from, n)
}

// replaySetup is a database with the seed table (and its archive), a side
// exchange with a queue consumed by the test, and a relay config whose
// primary and source replica are counting proxies: the replay must send the
// primary nothing, and the replica a bounded number of statements.
type replaySetup struct {
	db      *testenv.DB
	br      *testenv.Broker
	got     *testenv.Collector
	primary *statementCounter // the config's primary (sweeper_test.go)
	replica *statementCounter // the config's source
	name    string
	tables  string // the config's tables: entries
	cfgPath string
	seen    int // deliveries already returned by delivered
	// sentFrom and sentTo bound when the rows were first sent: insertSent
	// marks them SENT 50 minutes ago.
	sentFrom, sentTo time.Time
}

// newReplaySetup makes the database from ddl and a config for tables(its
// name) (nil: the seed table).
func newReplaySetup(t *testing.T, tables func(schema string) string, ddl ...string) *replaySetup {
	t.Helper()
	s := &replaySetup{db: testenv.NewDB(t, ddl...), br: testenv.NewBroker(t), name: testenv.UniqueName("replay"),
		sentFrom: time.Now().Add(-55 * time.Minute), sentTo: time.Now().Add(-45 * time.Minute)}
	s.got = s.br.Consume(t, s.br.Queue)
	s.primary = newStatementCounter(t, testenv.Addr(testenv.PrimaryDSN))
	s.replica = newStatementCounter(t, testenv.Addr(testenv.ReplicaDSN))
	if tables == nil {
		tables = relaytest.SeedTable
	}
	s.tables = tables(s.db.Name)
	s.cfgPath = relaytest.WriteConfig(t, relaytest.Config{Name: s.name, Tables: s.tables, Sections: map[string]string{
		"primary": fmt.Sprintf("{host: 127.0.0.1, port: %d, user: root}", s.primary.Port()),
		"source":  fmt.Sprintf("{host: 127.0.0.1, port: %d, user: root}", s.replica.Port()),
	}}.YAML())
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "binlog-relay:"+s.name+":*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		_ = rdb.Close()
	})
	return s
}

// run runs `binlog-relay replay` to its end.
func (s *replaySetup) run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(relaytest.Binary(t), append([]string{"replay", "--config", s.cfgPath}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// delivered is what the queue got since the last call, read once a barrier
// message published now has come through (testenv.Broker.Barrier): every
// message confirmed before the call is among them, a duplicate arriving
// last included.
func (s *replaySetup) delivered(t *testing.T) []testenv.Delivery {
	t.Helper()
	all := s.br.Barrier(t, s.got, 90*time.Second)
	out := all[s.seen:]
	s.seen = len(all)
	return out
}

// checkDelivered asserts the queue got exactly want (message ids) since the
// last look, in that order, once each, every one marked as a replay with
// the time the row was first sent, and returns the replay ids seen and the
// deliveries.
func (s *replaySetup) checkDelivered(t *testing.T, want []string) (map[string]int, []testenv.Delivery) {
	t.Helper()
	all := s.delivered(t)
	if len(all) != len(want) {
		t.Fatalf("%d messages arrived, want %d (once each)", len(all), len(want))
	}
	replays := map[string]int{}
	for i, d := range all {
		if d.MessageID != want[i] {
			t.Fatalf("message %d is %s, want %s (primary-key order, once each)", i, d.MessageID, want[i])
		}
		id, _ := d.Headers[replay.HeaderReplay].(string)
		if !strings.HasPrefix(id, s.name+"-replay-") {
			t.Fatalf("message %s: %s header %q, want the replay's id", d.MessageID, replay.HeaderReplay, id)
		}
		replays[id]++
		at, _ := d.Headers[replay.HeaderOriginalPublished].(string)
		if ts, err := time.Parse(time.RFC3339Nano, at); err != nil || ts.Before(s.sentFrom) || ts.After(s.sentTo) {
			t.Fatalf("message %s: %s header %q, want the row's update_time, between %s and %s", d.MessageID,
				replay.HeaderOriginalPublished, at, s.sentFrom.Format(time.RFC3339), s.sentTo.Format(time.RFC3339))
		}
	}
	return replays, all
}

// checkPrimaryUntouched asserts the replay sent the primary no statement,
// counted on the wire as the bench counts them (faultproxy.CommandTap): no
// query, no prepared statement executed, and no connection at all.
func (s *replaySetup) checkPrimaryUntouched(t *testing.T) {
	t.Helper()
	if q, x, c := s.primary.Commands(); q != 0 || x != 0 || c != 0 {
		t.Errorf("the replay sent the primary %d queries and %d prepared statement executions over %d connections, want none (%v)",
			q, x, c, s.primary.Counts())
	}
}

// replicaOverhead is what a replay may send the replica besides its chunk
// reads: the table check, the clock and the count, and one to spare.
const replicaOverhead = 4

// checkReplicaLoad asserts the replay's statements to the replica (its
// queries and prepared executions on the wire) were one read per chunk of
// the rows, plus replicaOverhead at most: a replay never reads row by row.
func (s *replaySetup) checkReplicaLoad(t *testing.T, rows, chunk int) {
	t.Helper()
	q, x, c := s.replica.Commands()
	if limit := rows/chunk + 1 + replicaOverhead; q+x > limit || q == 0 {
		t.Errorf("the replay sent the replica %d queries and %d prepared executions over %d connections for %d rows in chunks of %d, want 1 to %d (%v)",
			q, x, c, rows, chunk, limit, s.replica.Counts())
	} else {
		t.Logf("replica: %d queries, %d prepared executions, %d connections for %d rows in chunks of %d (%v)", q, x, c, rows, chunk, s.replica.Counts())
	}
}

func msgIDs(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// The done-when test: 50,000 SENT rows replayed to a side exchange at a set
// rate arrive once each, in primary-key order, with the replay headers, no
// faster than the rate; the primary gets no statement and no connection,
// the replica one read per chunk and a few more, and every row is still
// SENT, untouched.
func TestReplayRangeToSideExchange(t *testing.T) {
	testenv.Integration(t)
	testenv.LockHeavy(t)
	const rows, rate = 50000, 5000
	s := newReplaySetup(t, nil, "schema/producer_message.sql")
	insertSent(t, s.db, "producer_message", "rp", 0, rows)
	s.db.WaitReplicated(t, 60*time.Second)
	updated := s.db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE update_time < NOW(3) - INTERVAL 45 MINUTE")

	began := time.Now()
	code, out, errOut := s.run(t, "--table", s.db.Name+".producer_message", "--since", "2h", "--exchange", s.br.Exchange,
		"--rate", fmt.Sprintf("%d/s", rate), "--chunk-size", "2000", "--progress-interval", "2s")
	took := time.Since(began)
	if code != 0 {
		t.Fatalf("replay exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	replays, all := s.checkDelivered(t, msgIDs("rp", 1, rows))
	if len(replays) != 1 {
		t.Errorf("replay ids %v, want one", replays)
	}
	span := all[len(all)-1].At.Sub(all[0].At)
	if least := time.Duration(rows-1) * time.Second / rate * 9 / 10; span < least {
		t.Errorf("%d messages arrived within %s: faster than --rate %d/s allows (%s)", rows, span, rate, least)
	}
	for _, d := range all[:2] {
		if d.Exchange != s.br.Exchange || (d.RoutingKey != "order.created" && d.RoutingKey != "order.paid") {
			t.Errorf("message %s went to %s/%s, want the side exchange with its own routing key", d.MessageID, d.Exchange, d.RoutingKey)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("published %d, failed 0, of %d rows", rows, rows)) {
		t.Errorf("summary:\n%s", out)
	}
	if !strings.Contains(errOut, `"replay progress"`) {
		t.Errorf("no progress log line off a terminal:\n%s", tailOf(errOut, 2000))
	}
	s.checkPrimaryUntouched(t)
	s.checkReplicaLoad(t, rows, 2000)
	if n := s.db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT' AND update_time < NOW(3) - INTERVAL 45 MINUTE"); n != rows || n != updated {
		t.Errorf("%d rows still SENT and untouched, want %d", n, rows)
	}
	t.Logf("%d rows replayed at --rate %d/s: %s command, %s first to last delivery (%.0f msg/s)", rows, rate,
		took.Round(time.Millisecond), span.Round(time.Millisecond), float64(rows-1)/span.Seconds())
}

// SIGINT stops a replay after settling what is in flight; --resume sends
// the rest, and no message twice.
func TestReplayInterruptedAndResumed(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, relay name and proxies
	const rows = 3000
	s := newReplaySetup(t, nil, "schema/producer_message.sql")
	insertSent(t, s.db, "producer_message", "ri", 0, rows)
	s.db.WaitReplicated(t, 60*time.Second)

	logPath := filepath.Join(t.TempDir(), "replay.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(relaytest.Binary(t), "replay", "--config", s.cfgPath, "--exchange", s.br.Exchange, "--rate", "1000/s", "--chunk-size", "200")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	testenv.WaitFor(t, 30*time.Second, "the first 500 messages", func() (bool, string) {
		n := s.got.Len()
		return n >= 500, fmt.Sprintf("%d arrived", n)
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	log, _ := os.ReadFile(logPath)
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("interrupted replay: %v, want exit 3\n%s", err, tailOf(string(log), 3000))
	}
	if !strings.Contains(string(log), "interrupted") || !strings.Contains(string(log), "--resume") {
		t.Errorf("the interrupted run does not say how to continue:\n%s", tailOf(string(log), 2000))
	}
	m := regexp.MustCompile(`published (\d+), failed 0, of 3000 rows`).FindStringSubmatch(string(log))
	if m == nil {
		t.Fatalf("no summary from the interrupted run:\n%s", tailOf(string(log), 2000))
	}
	first, _ := strconv.Atoi(m[1])
	if first < 500 || first >= rows {
		t.Fatalf("the interrupted run published %d of %d rows, want at least the 500 seen and not all", first, rows)
	}
	code, out, errOut := s.run(t, "--resume", "--rate", "0")
	if code != 0 {
		t.Fatalf("resumed replay exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	replays, _ := s.checkDelivered(t, msgIDs("ri", 1, rows))
	if len(replays) != 1 {
		t.Errorf("replay ids %v: the resumed run must carry the same replay id", replays)
	}
	if !strings.Contains(out, fmt.Sprintf("published %d, failed 0, of %d rows; this run %d rows", rows, rows, rows-first)) {
		t.Errorf("summary of the resumed run (%d before the interrupt):\n%s", first, out)
	}
	s.checkPrimaryUntouched(t)
	// Finished: nothing is left to resume.
	if code, _, errOut := s.run(t, "--resume"); code != 2 || !strings.Contains(errOut, "nothing to resume") {
		t.Errorf("--resume after the end: exit %d, %s", code, errOut)
	}
	t.Logf("interrupted after %d of %d messages; resumed run sent %d", first, rows, rows-first)
}

// The archive table is replayed the same way, with --ids and --where
// narrowing the range.
func TestReplayArchive(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, relay name and proxies
	s := newReplaySetup(t, nil, "schema/producer_message.sql", "schema/producer_message_archive.sql")
	insertSent(t, s.db, "producer_message_archive", "ra", 0, 2000)
	insertSent(t, s.db, "producer_message", "rl", 2000, 10) // live rows: not part of an --archive replay
	s.db.WaitReplicated(t, 60*time.Second)

	code, out, errOut := s.run(t, "--archive", "--ids", "501-1500", "--where", "routing_key=order.paid", "--exchange", s.br.Exchange, "--rate", "0")
	if code != 0 {
		t.Fatalf("replay exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var want []string
	for i := 501; i <= 1500; i++ {
		if (i-1)%2 == 1 { // order.paid rows
			want = append(want, fmt.Sprintf("ra-%d", i))
		}
	}
	s.checkDelivered(t, want)
	if !strings.Contains(out, s.db.Name+".producer_message_archive") || !strings.Contains(out, fmt.Sprintf("published %d, failed 0", len(want))) {
		t.Errorf("summary:\n%s", out)
	}
	// A dry run counts and shows samples, publishing nothing: the queue,
	// bound to the exchange it names, gets no message (the barrier after
	// it is the first thing to arrive).
	code, out, errOut = s.run(t, "--archive", "--dry-run", "--samples", "2", "--exchange", s.br.Exchange)
	if code != 0 || !strings.Contains(out, "dry run: 2000 rows") || !strings.Contains(out, "message_id ra-1 ") || !strings.Contains(out, "message_id ra-2 ") {
		t.Errorf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if d := s.delivered(t); len(d) != 0 {
		t.Errorf("the dry run published %d messages (the first %s), want none", len(d), d[0].MessageID)
	}
	s.checkPrimaryUntouched(t)
}

// What a replay refuses, each with a message that says why and exit 2:
// a range that matches nothing, a table without a status column, an
// archive table that does not exist, a --where that is not a mapped field
// or is SQL.
func TestReplayRefusals(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, relay name and proxies
	s := newReplaySetup(t, func(schema string) string {
		return relaytest.SeedTable(schema) + fmt.Sprintf("  - {preset: producer-message, schema: %s, name: nostatus, columns: {status: \"\"}}\n", schema)
	}, "schema/producer_message.sql")
	db := s.db
	insertSent(t, db, "producer_message", "rr", 0, 10)
	db.Exec(t, "CREATE TABLE nostatus LIKE producer_message")
	db.WaitReplicated(t, 30*time.Second)
	seed := db.Name + ".producer_message"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing matches", []string{"--table", seed, "--ids", "900000-900010"}, "no row of " + seed + " matches: SENT rows ids 900000-900010"},
		{"no status column", []string{"--table", db.Name + ".nostatus"}, "has no status column"},
		{"no archive", []string{"--table", seed, "--archive"}, "the archive table " + seed + "_archive does not exist"},
		{"unmapped field", []string{"--table", seed, "--where", "content=x"}, "maps no field \"content\""},
		{"sql", []string{"--table", seed, "--where", "1 OR 1=1"}, "is not a name"},
		{"resume nothing", []string{"--table", seed, "--resume"}, "nothing to resume"},
		{"resume with a range", []string{"--table", seed, "--resume", "--ids", "1-2"}, "--resume continues the saved replay"},
	} {
		code, out, errOut := s.run(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q (want exit 2 and %q); stdout %q", tc.name, code, errOut, tc.want, out)
		}
	}
	if d := s.delivered(t); len(d) != 0 {
		t.Errorf("%d messages published by refused replays", len(d))
	}
	// Publishes are mandatory: to an exchange no queue is bound to, every
	// message fails, is counted and listed, and the replay exits 1.
	code, out, errOut := s.run(t, "--table", seed, "--exchange", testenv.NewExchange(t), "--rate", "0")
	if code != 1 || !strings.Contains(out, "published 0, failed 10, of 10 rows") || !strings.Contains(out, "failed ids (first 10): 1, 2, 3, 4, 5, 6, 7, 8, 9, 10;") {
		t.Errorf("unroutable replay: exit %d, want 1 and every row listed failed\nstdout %s\nstderr %s", code, out, tailOf(errOut, 2000))
	}
	if !strings.Contains(errOut, "replay publish failed") || !strings.Contains(errOut, "unroutable") {
		t.Errorf("the failures are not logged with their reason:\n%s", tailOf(errOut, 2000))
	}
	s.checkPrimaryUntouched(t)
}

func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// The same interrupt and resume driven in-process through app.Replay (so
// `go test -race` watches the feeder, publisher and collector), with a
// context cancelled instead of SIGINT, over a range of ids.
func TestReplayResumeInProcess(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, relay name and proxies
	s := newReplaySetup(t, nil, "schema/producer_message.sql")
	insertSent(t, s.db, "producer_message", "rq", 0, 2500)
	s.db.WaitReplicated(t, 60*time.Second)
	yaml, err := os.ReadFile(s.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a := relaytest.OpenApp(t, string(yaml))
	o := command.ReplayOptions{Range: replay.Range{IDs: &replay.IDRange{From: 101, To: 2100}}, Exchange: s.br.Exchange,
		Rate: 2000, ChunkSize: 300, Samples: 5, ProgressEvery: 100 * time.Millisecond}
	type outcome struct {
		sum *replay.Summary
		err error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out strings.Builder
	done := make(chan outcome, 1)
	go func() {
		sum, err := command.Replay(ctx, a.Env(), o, &out, io.Discard)
		done <- outcome{sum, err}
	}()
	testenv.WaitFor(t, 30*time.Second, "the first 400 messages", func() (bool, string) {
		n := s.got.Len()
		return n >= 400, fmt.Sprintf("%d arrived", n)
	})
	cancel()
	res := testenv.Receive(t, done, 60*time.Second, "the interrupted replay to return")
	sum, err := res.sum, res.err
	if !errors.Is(err, context.Canceled) || sum == nil || !sum.Interrupted {
		t.Fatalf("interrupted replay: %+v, %v\n%s", sum, err, out.String())
	}
	first := int(sum.Published)
	if sum.Cursor != fmt.Sprint(100+first) {
		t.Fatalf("the interrupted run published %d rows from id 101 but its cursor is at %s", first, sum.Cursor)
	}
	// Confirmed by the broker is not yet delivered to the test's consumer.
	testenv.WaitFor(t, 30*time.Second, "the messages confirmed before the interrupt", func() (bool, string) {
		n := s.got.Len()
		return n >= first, fmt.Sprintf("%d of %d arrived", n, first)
	})
	o2 := command.ReplayOptions{Resume: true, Rate: 0, ChunkSize: 300, Samples: 5, ProgressEvery: time.Second}
	sum, err = command.Replay(context.Background(), a.Env(), o2, &out, io.Discard)
	if err != nil || sum.Published != 2000 || sum.ThisRun != int64(2000-first) {
		t.Fatalf("resumed replay: %+v, %v\n%s", sum, err, out.String())
	}
	s.checkDelivered(t, msgIDs("rq", 101, 2100))
	s.checkPrimaryUntouched(t)
}

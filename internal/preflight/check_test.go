package preflight

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/source"
)

func TestProblems(t *testing.T) {
	warn := Problem{Severity: Warning, Where: "source r1:3306", Text: "gtid_mode is OFF"}
	err1 := Problem{Severity: Error, Where: "broker", Text: "cannot connect"}
	err2 := Problem{Severity: Error, Where: "redis", Text: "cannot reach r:6379"}
	info := Problem{Severity: Info, Where: "source", Text: "compressed"}
	if got, want := warn.String(), "WARN source r1:3306: gtid_mode is OFF"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name  string
		ps    []Problem
		has   bool
		first string
	}{
		{"none", nil, false, ""},
		{"warnings and infos only", []Problem{warn, info}, false, ""},
		{"the first error is the summary", []Problem{warn, err1, info, err2}, true, "ERROR broker: cannot connect"},
	} {
		if got := HasErrors(tc.ps); got != tc.has {
			t.Errorf("%s: HasErrors = %v, want %v", tc.name, got, tc.has)
		}
		if got := FirstError(tc.ps); got != tc.first {
			t.Errorf("%s: FirstError = %q, want %q", tc.name, got, tc.first)
		}
	}
}

func TestReport(t *testing.T) {
	var r Report
	if len(r.Problems()) != 0 {
		t.Fatal("an empty report has problems")
	}
	r.Add(Warning, "relay x", "another relay named %q is running (instance %s)", "x", "h-1")
	r.Add(Error, "redis", "cannot reach %s: %v", "r:6379", errors.New("refused"))
	want := []Problem{
		{Severity: Warning, Where: "relay x", Text: `another relay named "x" is running (instance h-1)`},
		{Severity: Error, Where: "redis", Text: "cannot reach r:6379: refused"},
	}
	got := r.Problems()
	if len(got) != len(want) {
		t.Fatalf("problems %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("problem %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// closedPort is a loopback address nothing listens on: a listener's,
// closed.
func closedPort(t *testing.T) (string, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	_ = l.Close()
	return addr.IP.String(), addr.Port
}

// deadDB is a pool to a MySQL server that is not there.
func deadDB(t *testing.T, m config.MySQL) *sql.DB {
	t.Helper()
	db, err := source.OpenDB(m, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// fakeRedis answers PING with err.
type fakeRedis struct{ err error }

func (f fakeRedis) Ping(ctx context.Context) *redis.StatusCmd {
	cmd := redis.NewStatusCmd(ctx, "ping")
	cmd.SetErr(f.err)
	return cmd
}

// Nothing answers: each server is one problem, in the order of the
// checks, and nothing that needs the source runs.
func TestCheckNothingAnswers(t *testing.T) {
	host, port := closedPort(t)
	src := config.MySQL{Host: host, Port: port, User: "relay", Password: "s3cret"}
	pri := config.MySQL{Host: host, Port: port, User: "writer", Password: "s3cret"}
	cfg := &config.Config{Source: src, Primary: pri,
		Broker: config.Broker{URL: "amqp://guest:s3cret@" + net.JoinHostPort(host, strconv.Itoa(port)) + "/"},
		Redis:  config.Redis{Addr: "redis.test:6379"}}
	sourceOnly := func(ctx context.Context, r *Report) { t.Error("a check that needs the source ran without it") }
	ends := 0
	s := &Servers{
		Config: cfg, Log: zap.NewNop(),
		Source: deadDB(t, src), SourceConfig: func() config.MySQL { return src },
		Flavor: func(context.Context) (string, error) {
			t.Error("Flavor asked of a source that does not answer")
			return "", errors.New("no source")
		},
		Primary:     deadDB(t, pri),
		Redis:       fakeRedis{errors.New("dial tcp redis.test:6379: connection refused")},
		OnSource:    []Extra{sourceOnly},
		AfterStream: []Extra{sourceOnly},
		AtEnd: []Extra{func(_ context.Context, r *Report) {
			ends++
			r.Add(Warning, "reconcile", "the end")
		}},
	}
	ps := Check(context.Background(), s)
	wheres := []string{"source " + src.Addr(), "primary " + pri.Addr(), "broker amqp://guest:xxxxx@" + src.Addr() + "/", "redis", "reconcile"}
	if len(ps) != len(wheres) {
		t.Fatalf("problems:\n%s\nwant one for each of %q", lines(ps), wheres)
	}
	for i, w := range wheres {
		if ps[i].Where != w {
			t.Errorf("problem %d is about %q, want %q: %s", i, ps[i].Where, w, ps[i])
		}
		if strings.Contains(ps[i].String(), "s3cret") {
			t.Errorf("a password in %s", ps[i])
		}
	}
	if ends != 1 {
		t.Errorf("the checks at the end ran %d times, want once", ends)
	}
	for _, want := range []string{"cannot connect as relay: ", "cannot connect as writer: ", "cannot connect: ", "cannot reach redis.test:6379: "} {
		if !strings.Contains(lines(ps), want) {
			t.Errorf("no problem says %q:\n%s", want, lines(ps))
		}
	}
	if !HasErrors(ps) || !strings.HasPrefix(FirstError(ps), "ERROR source "+src.Addr()+": cannot connect as relay") {
		t.Errorf("first error %q, want the source's", FirstError(ps))
	}
}

func lines(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

// Lint reports the checks app owns as config errors, each once.
func TestLintRunsTheOwnedChecks(t *testing.T) {
	cfg := &config.Config{Name: "relay"}
	ok := ConfigChecks{
		NewLogger:   func(config.Log) (*zap.Logger, error) { return zap.NewNop(), nil },
		CheckStages: func(*config.Config) error { return nil },
	}
	failing := ConfigChecks{
		NewLogger:   func(config.Log) (*zap.Logger, error) { return nil, errors.New("log.level: unrecognized level") },
		CheckStages: func(*config.Config) error { return errors.New("relay.batch_size: must be at least 1") },
	}
	base := lines(Lint(cfg, ok))
	got := lines(Lint(cfg, failing))
	for _, want := range []string{"ERROR config: log.level: unrecognized level\n", "ERROR config: relay.batch_size: must be at least 1\n"} {
		if strings.Contains(base, want) || strings.Count(got, want) != 1 {
			t.Errorf("want %q once in:\n%s", want, got)
		}
	}
	if len(got) != len(base)+len("ERROR config: log.level: unrecognized level\nERROR config: relay.batch_size: must be at least 1\n") {
		t.Errorf("lint with the owned checks failing:\n%s\nwithout:\n%s", got, base)
	}
}

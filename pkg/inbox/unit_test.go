package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Unit tests: pure logic and fakes only, so they run with -short and without servers.

func TestConfigDefaultsAreValid(t *testing.T) {
	cfg := Config{URL: "amqp://x", Queue: "q", ConsumerName: "c"}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if cfg.Table != "consumer_message" || cfg.Workers != 8 || cfg.Prefetch != 16 || cfg.MaxRetries != 5 {
		t.Errorf("unexpected defaults: %+v", cfg)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	valid := Config{URL: "amqp://x", Queue: "q", ConsumerName: "c"}
	cases := []struct {
		field  string
		mutate func(*Config)
	}{
		{"URL", func(c *Config) { c.URL = "" }},
		{"Queue", func(c *Config) { c.Queue = "" }},
		{"ConsumerName", func(c *Config) { c.ConsumerName = "" }},
		{"ConsumerName", func(c *Config) { c.ConsumerName = strings.Repeat("c", 129) }},
		{"Table", func(c *Config) { c.Table = "consumer_message; DROP TABLE x" }},
		{"Workers", func(c *Config) { c.Workers = -1 }},
		{"Prefetch", func(c *Config) { c.Workers, c.Prefetch = 8, 4 }},
		{"MaxRetries", func(c *Config) { c.MaxRetries = -2 }},
		{"RetryMaxBackoff", func(c *Config) { c.RetryBackoff, c.RetryMaxBackoff = time.Minute, time.Second }},
		{"RetryStuckTimeout", func(c *Config) { c.RetryStuckTimeout = -time.Second }},
		{"ReconnectMaxDelay", func(c *Config) { c.ReconnectDelay, c.ReconnectMaxDelay = time.Minute, time.Second }},
	}
	for _, tc := range cases {
		cfg := valid
		tc.mutate(&cfg)
		err := cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: Validate() = %v, want an error naming %s", tc.field, err, tc.field)
		}
	}
}

func TestConfigErrorsKeepTheURLSecret(t *testing.T) {
	err := Config{URL: "amqp://user:s3cret@host/", Workers: -1}.WithDefaults().Validate()
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Validate() = %v: want an error without the password", err)
	}
}

func TestBackoff(t *testing.T) {
	cases := []struct {
		retry     int
		base, max time.Duration
		want      time.Duration
	}{
		{0, time.Second, time.Minute, time.Second},
		{1, time.Second, time.Minute, 2 * time.Second},
		{3, time.Second, time.Minute, 8 * time.Second},
		{6, time.Second, time.Minute, time.Minute}, // 64s capped
		{-1, time.Second, time.Minute, time.Second},
		{200, time.Second, time.Minute, time.Minute}, // no overflow
		{0, time.Minute, time.Second, time.Second},   // base above max
	}
	for _, tc := range cases {
		if got := Backoff(tc.retry, tc.base, tc.max); got != tc.want {
			t.Errorf("Backoff(%d, %s, %s) = %s, want %s", tc.retry, tc.base, tc.max, got, tc.want)
		}
	}
}

func TestMalformed(t *testing.T) {
	cause := errors.New("missing sku")
	err := fmt.Errorf("handling order: %w", Malformed(cause))
	if !errors.Is(err, ErrMalformed) || !errors.Is(err, cause) {
		t.Errorf("Malformed must match ErrMalformed and keep its cause: %v", err)
	}
	if err.Error() != "handling order: malformed message: missing sku" {
		t.Errorf("text = %q", err.Error())
	}
	if !errors.Is(Malformed(nil), ErrMalformed) {
		t.Errorf("Malformed(nil) must still be malformed")
	}
	if errors.Is(errors.New("timeout"), ErrMalformed) {
		t.Errorf("plain errors are not malformed")
	}
}

func TestIDProblem(t *testing.T) {
	cases := map[string]string{
		"order-1":                              "",
		"":                                     "message has no message id",
		strings.Repeat("a", MaxMessageIDLen):   "",
		strings.Repeat("a", MaxMessageIDLen+1): "message id is 129 bytes, longer than 128",
		"bad\xff":                              "message id is not valid UTF-8",
	}
	for id, want := range cases {
		if got := idProblem(id, MaxMessageIDLen); got != want {
			t.Errorf("idProblem(%q, MaxMessageIDLen) = %q, want %q", id, got, want)
		}
	}
}

func TestDerivedIDIsStablePerDelivery(t *testing.T) {
	a := Message{Body: []byte("x"), Exchange: "e", RoutingKey: "k"}
	b := a
	c := Message{Body: []byte("y"), Exchange: "e", RoutingKey: "k"}
	if derivedID(a) != derivedID(b) || derivedID(a) == derivedID(c) {
		t.Errorf("derivedID must depend on the delivery only: %s %s %s", derivedID(a), derivedID(b), derivedID(c))
	}
	if len(derivedID(a)) > MaxMessageIDLen {
		t.Errorf("derived id %q does not fit the column", derivedID(a))
	}
}

func TestErrorTextFitsTheColumn(t *testing.T) {
	long := errors.New(strings.Repeat("é", 600) + "\xff")
	got := errorText(long)
	if len(got) > maxErrorMsgLen || !utf8.ValidString(got) {
		t.Errorf("errorText gave %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
	if errorText(errors.New("bad\xffbyte")) != "bad?byte" {
		t.Errorf("invalid bytes must be replaced")
	}
}

// fakeDedup is a DedupStore in memory that can be made to fail.
type fakeDedup struct {
	keys  map[string]bool
	err   error
	calls int
}

func (f *fakeDedup) Seen(_ context.Context, key string) (bool, error) {
	f.calls++
	return f.keys[key], f.err
}

func (f *fakeDedup) MarkDone(_ context.Context, key string, _ time.Duration) error {
	f.calls++
	if f.err != nil {
		return f.err
	}
	f.keys[key] = true
	return nil
}

func TestDedupGuard(t *testing.T) {
	cfg := Config{ConsumerName: "inv"}.WithDefaults()
	f := &fakeDedup{keys: map[string]bool{}}
	g := newDedupGuard(f, cfg, orDiscard(nil))
	ctx := context.Background()
	if g.seen(ctx, "m1") {
		t.Fatal("unseen key reported seen")
	}
	g.markDone(ctx, "m1")
	if !f.keys["inbox:inv:m1"] || !g.seen(ctx, "m1") {
		t.Fatalf("marker not written under the prefixed key: %v", f.keys)
	}

	// An error pauses the fast path: the database alone answers, without a Redis
	// call per message.
	f.err = errors.New("connection refused")
	if g.seen(ctx, "m1") {
		t.Error("a failing store must report unseen")
	}
	calls := f.calls
	for i := 0; i < 100; i++ {
		g.seen(ctx, "m1")
		g.markDone(ctx, "m2")
	}
	if f.calls != calls {
		t.Errorf("%d store calls during the pause, want 0", f.calls-calls)
	}
	var nilGuard *dedupGuard
	if nilGuard.seen(ctx, "m1") {
		t.Error("a disabled fast path must report unseen")
	}
	nilGuard.markDone(ctx, "m1")
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{Processed: "processed", Duplicate: "duplicate",
		RetryScheduled: "retry_scheduled", Failed: "failed", 0: "unknown"} {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", o, o.String(), want)
		}
	}
}

func TestCountersSnapshot(t *testing.T) {
	var c Counters
	for _, o := range []Outcome{Processed, Duplicate, Duplicate, RetryScheduled, Failed} {
		recordOutcome(&c, o, time.Millisecond)
	}
	want := Snapshot{Processed: 1, Duplicates: 2, Retries: 1, Failed: 1}
	if got := c.Snapshot(); got != want || got.Total() != 5 {
		t.Errorf("Snapshot() = %+v, want %+v", got, want)
	}
}

func TestPermanentBrokerErrors(t *testing.T) {
	if permanent(errors.New("dial tcp: connection refused")) {
		t.Error("a refused dial is worth retrying")
	}
	if !permanent(fmt.Errorf("consuming: %w", &amqp.Error{Code: amqp.NotFound, Reason: "no queue"})) {
		t.Error("a missing queue will not appear by reconnecting")
	}
	if !permanent(amqp.ErrCredentials) {
		t.Error("bad credentials will not heal by reconnecting")
	}
}

// The error classes that decide between "run the transaction again", "record the
// message FAILED" and "requeue".
func TestMySQLErrorClasses(t *testing.T) {
	dup := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}
	lockWait := &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
	tooBig := &mysql.MySQLError{Number: 1153, Message: "Got a packet bigger than 'max_allowed_packet' bytes"}
	wrap := func(err error) error { return fmt.Errorf("deducting stock: %w", err) }
	if !isDuplicateKey(wrap(dup)) || isDuplicateKey(deadlock) {
		t.Error("isDuplicateKey")
	}
	if !isTransient(wrap(deadlock)) || !isTransient(lockWait) || !isTransient(errRowVanished) || isTransient(dup) {
		t.Error("isTransient")
	}
	if isTransient(unrecorded(wrap(deadlock))) || !isDeadlock(unrecorded(wrap(deadlock))) || unrecorded(nil) != nil {
		t.Error("a handler failure that could not be recorded is not transient, and keeps its cause")
	}
	if !isTooLarge(wrap(tooBig)) || !isTooLarge(mysql.ErrPktTooLarge) || isTooLarge(dup) {
		t.Error("isTooLarge")
	}
}

func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// runTx runs a delivery's transaction again after a deadlock, but not after one
// that came from recording the failure of a handler that ran: that would run the
// handler a second time for one delivery.
func TestRunTxDoesNotRerunAfterUnrecordedFailure(t *testing.T) {
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}
	in := &Inbox{log: orDiscard(nil)}
	for _, c := range []struct {
		name     string
		err      error
		wantRuns int
	}{
		{"deadlock in the handler's transaction", fmt.Errorf("deducting stock: %w", deadlock), txAttempts},
		{"deadlock recording the handler's failure", unrecorded(fmt.Errorf("recording failure: %w", deadlock)), 1},
		{"row vanished before the handler ran", errRowVanished, txAttempts},
	} {
		runs := 0
		_, err := in.runTx(t.Context(), Message{ID: "m"}, func(context.Context, Message, bool) (Outcome, error) {
			runs++
			return 0, c.err
		})
		if runs != c.wantRuns || !errors.Is(err, c.err) {
			t.Errorf("%s: ran %d times and returned %v, want %d runs and the error", c.name, runs, err, c.wantRuns)
		}
	}
}

// A pool whose sessions run with unique_checks=0 is refused, naming the
// variable and why; one with unique checks on passes.
func TestUniqueChecksOffIsRefused(t *testing.T) {
	if err := uniqueChecksProblem(true); err != nil {
		t.Errorf("unique_checks=1 refused: %v", err)
	}
	err := uniqueChecksProblem(false)
	if err == nil || !strings.Contains(err.Error(), "unique_checks=0") || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("unique_checks=0: %v, want a refusal naming unique_checks=0 and the duplicates it lets through", err)
	}
}

package replay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/serverclock"
	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// A --where term names a mapped field and a value; anything else, SQL
// above all, is refused before it reaches a statement.
func TestParseWhere(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Cond
		err  string
	}{
		{in: "routing_key=order.created", want: Cond{Field: "routing_key", Value: "order.created"}},
		{in: "aggregatetype!=Order", want: Cond{Field: "aggregatetype", Not: true, Value: "Order"}},
		{in: "exchange=a=b", want: Cond{Field: "exchange", Value: "a=b"}},
		{in: "routing_key=x' OR '1'='1", want: Cond{Field: "routing_key", Value: "x' OR '1'='1"}}, // a value: bound, never SQL
		{in: "1 OR 1=1", err: "is not a name"},
		{in: "status IN ('SENT')", err: "want field=value"},
		{in: "routing_key`=x", err: "is not a name"},
		{in: "=x", err: "want field=value"},
		{in: "routing_key", err: "want field=value"},
	} {
		got, err := ParseWhere(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%q: %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func seed(t *testing.T) *outbox.Table { return outboxtest.Preset(t, "producer-message", "shop", nil) }

var testClock = serverclock.Clock{Wall: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), Unix: 1777636800, At: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}

// The filter is SQL built from the config's identifiers, quoted, and
// placeholders: the user's values are arguments only.
func TestBuildFilter(t *testing.T) {
	tb := seed(t)
	w1, _ := ParseWhere("routing_key=x' OR '1'='1")
	w2, _ := ParseWhere("exchange!=audit")
	since := testClock.At.Add(-2 * time.Hour)
	f, err := buildFilter(tb, Range{Since: since, Until: testClock.At, IDs: &IDRange{10, 20}, Where: []Cond{w1, w2}}, testClock)
	if err != nil {
		t.Fatal(err)
	}
	want := "`status` = ? AND `create_time` >= ? AND `create_time` < ? AND `id` BETWEEN ? AND ? AND `routing_key` = ? AND `exchange` <> ?"
	if f.cond != want {
		t.Errorf("cond\n %s\nwant\n %s", f.cond, want)
	}
	args := []any{"SENT", "2026-05-01 10:00:00", "2026-05-01 12:00:00", int64(10), int64(20), "x' OR '1'='1", "audit"}
	if len(f.args) != len(args) {
		t.Fatalf("args %v, want %v", f.args, args)
	}
	for i := range args {
		if f.args[i] != args[i] {
			t.Errorf("arg %d: %#v, want %#v", i, f.args[i], args[i])
		}
	}
}

// Fields outside the mapping, and the payload, are refused with the list
// of those that work; a mapped column works by its own name.
func TestWhereFields(t *testing.T) {
	tb := seed(t)
	for _, f := range []string{"content", "payload", "status", "secret_column"} {
		c, _ := ParseWhere(f + "=x")
		if _, err := c.Resolve(tb); err == nil || !strings.Contains(err.Error(), "routing_key") {
			t.Errorf("%s: %v, want a refusal listing the fields", f, err)
		}
	}
	c, _ := ParseWhere("message_id=m-1")
	if r, err := c.Resolve(tb); err != nil || r.Column != "message_id" {
		t.Errorf("message_id: %+v %v", r, err)
	}
	deb := outboxtest.Preset(t, "debezium", "shop", nil)
	c, _ = ParseWhere("AggregateType=Order")
	if r, err := c.Resolve(deb); err != nil || r.Column != "aggregatetype" {
		t.Errorf("debezium aggregatetype: %+v %v", r, err)
	}
}

// A table without a status column cannot tell sent rows from the rest:
// the replay refuses it and says why.
func TestFilterNeedsStatus(t *testing.T) {
	deb := outboxtest.Preset(t, "debezium", "shop", nil)
	_, err := buildFilter(deb, Range{}, testClock)
	if err == nil || !strings.Contains(err.Error(), "no status column") {
		t.Fatalf("%v", err)
	}
	local := outboxtest.Preset(t, "local-message", "shop", nil)
	f, err := buildFilter(local, Range{}, testClock)
	if err != nil || f.args[0] != int64(1) {
		t.Fatalf("numeric status: %v %v", f.args, err)
	}
}

func TestParseIDsAndRate(t *testing.T) {
	if r, err := ParseIDs("100-199"); err != nil || r != (IDRange{100, 199}) {
		t.Errorf("100-199: %v %v", r, err)
	}
	if r, err := ParseIDs("7"); err != nil || r != (IDRange{7, 7}) {
		t.Errorf("7: %v %v", r, err)
	}
	for _, bad := range []string{"9-1", "a-b", "1-", "1;DROP TABLE x"} {
		if _, err := ParseIDs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for in, want := range map[string]float64{"500": 500, "500/s": 500, "600/m": 10, "3600/h": 1, "0": 0} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("rate %q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1", "fast", "5/d", "NaN", "Inf"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("rate %q accepted", bad)
		}
	}
}

// The pacer holds messages to the rate and makes up a pause with no more
// than a short burst.
func TestPacer(t *testing.T) {
	p := newPacer(1000)
	began := time.Now()
	for range 150 { // the first 50 are the burst the bucket starts with
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(began); d < 95*time.Millisecond || d > 300*time.Millisecond {
		t.Errorf("150 messages at 1000/s (a burst of 50) took %s, want about 100ms", d)
	}
	// After a pause of a second, at most burstWindow's worth goes at once.
	now := time.Now().Add(time.Second)
	p.now = func() time.Time { return now }
	free := 0
	for p.next.Sub(now) <= 0 {
		_ = p.wait(context.Background())
		free++
	}
	if want := int(burstWindow / time.Millisecond); free != want {
		t.Errorf("after a pause %d messages went without waiting, want %d (the burst)", free, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := newPacer(0.001).wait(ctx); err == nil {
		t.Error("wait ignored a cancelled context")
	}
}

// The terminal bar shows the rows settled over the total, the share, this
// run's rate, the time left at it and the failures.
func TestProgressBar(t *testing.T) {
	r := &Replayer{st: &State{Total: 200}}
	r.published.Store(45)
	r.failed.Store(5)
	r.settled.Store(50)
	got := r.bar(time.Now().Add(-10 * time.Second))
	want := "[#######.......................] 50/200  25.0%  5 rows/s  ETA 30s  failed 5"
	if got != want {
		t.Fatalf("bar\n got %q\nwant %q", got, want)
	}
	r.published.Store(195)
	if got := r.bar(time.Now().Add(-10 * time.Second)); !strings.HasPrefix(got, "[##############################] 200/200 100.0%") || !strings.Contains(got, "ETA 0s") {
		t.Fatalf("a finished bar: %q", got)
	}
}

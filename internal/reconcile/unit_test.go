package reconcile

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

// Routing keys match binding patterns as a topic exchange matches them.
func TestTopicMatch(t *testing.T) {
	cases := []struct {
		pattern, key string
		want         bool
	}{
		{"order.*", "order.paid", true},
		{"order.*", "order.paid.eu", false},
		{"order.#", "order", true},
		{"order.#", "order.paid.eu", true},
		{"#", "", true},
		{"#", "a.b.c", true},
		{"", "", true},
		{"", "a", false},
		{"*.paid", "order.paid", true},
		{"*.paid", "paid", false},
		{"#.paid", "paid", true},
		{"a.#.z", "a.z", true},
		{"a.#.z", "a.b.c.z", true},
		{"a.#.z", "a.b.c", false},
		{"order.paid", "order.paid", true},
		{"order.paid", "order.Paid", false},
	}
	for _, c := range cases {
		if got := newFilter(nil, []string{c.pattern}).match("ex", c.key); got != c.want {
			t.Errorf("pattern %q, key %q: %v, want %v", c.pattern, c.key, got, c.want)
		}
	}
	f := newFilter([]string{"orders"}, nil)
	if !f.match("orders", "x") || f.match("billing", "x") || f.any() {
		t.Error("exchange filter")
	}
	if !newFilter(nil, nil).any() {
		t.Error("an empty filter lets everything through")
	}
}

// What the inbox rows of one message id say: processed, failed, still
// retrying, recorded twice, or nothing. A processing log's SUCCESS alone is
// not a handled message (the dedup row commits with the work).
func TestVerdict(t *testing.T) {
	layout := func(preset string) inbox.Preset {
		l, err := inbox.Config{Preset: preset}.Layout()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	state := &consumer{layout: layout("inbox")}
	dedup := &consumer{layout: layout("msg-dedup")}
	rec := func(c *consumer, status string, log bool) record {
		return record{msgID: "m", log: log, state: c.stateOf(status, log)}
	}
	cases := []struct {
		name                                 string
		recs                                 []record
		processed, failed, busy, dup, record bool
	}{
		{"none", nil, false, false, false, false, false},
		{"success", []record{rec(state, "SUCCESS", false)}, true, false, false, false, true},
		{"success twice", []record{rec(state, "SUCCESS", false), rec(state, "SUCCESS", false)}, true, false, false, true, true},
		{"failed", []record{rec(state, "FAILED", false)}, false, true, false, false, true},
		{"pending retry", []record{rec(state, "PENDING_RETRY", false)}, false, false, true, false, true},
		{"retrying", []record{rec(state, "RETRYING", false)}, false, false, true, false, true},
		{"dedup row", []record{rec(dedup, "", false)}, true, false, false, false, true},
		{"log success first", []record{rec(dedup, "SUCCESS", true), rec(dedup, "", false)}, true, false, false, false, true},
		{"log success alone", []record{rec(dedup, "SUCCESS", true)}, false, false, false, false, true},
		{"log failed", []record{rec(dedup, "FAILED", true)}, false, true, false, false, true},
		{"log processing", []record{rec(dedup, "PROCESSING", true)}, false, false, true, false, true},
		{"log twice", []record{rec(dedup, "", false), rec(dedup, "SUCCESS", true), rec(dedup, "SUCCESS", true)}, true, false, false, true, true},
	}
	for _, c := range cases {
		var v verdict
		for _, r := range c.recs {
			v.add(r)
		}
		if v.processed != c.processed || v.failed != c.failed || v.busy != c.busy || v.duplicate() != c.dup || v.recorded() != c.record {
			t.Errorf("%s: %+v (duplicate %v, recorded %v)", c.name, v, v.duplicate(), v.recorded())
		}
	}
}

func TestSubtract(t *testing.T) {
	got := subtract([]string{"a", "b", "c", "d"}, []string{"b", "d", "e"})
	if strings.Join(got, ",") != "a,c" {
		t.Fatalf("got %v", got)
	}
	if got := subtract([]string{"a"}, nil); len(got) != 1 {
		t.Fatalf("got %v", got)
	}
}

// placeholders is one "?" per argument.
func TestPlaceholders(t *testing.T) {
	if got := placeholders(3); got != "?, ?, ?" {
		t.Errorf("placeholders: %q", got)
	}
}

// The counts add up to the differences; the text names every finding with
// its ids; JSON has [] rather than null for no ids.
func TestReportOutput(t *testing.T) {
	r := &Report{Relay: "orders", GracePeriod: "5m0s", PendingAfter: "15m0s"}
	tr := &TableReport{Table: "shop.producer_message", pairs: map[string]*PairReport{}}
	tr.PendingStale.add("p-1", 10)
	p := tr.pair("inventory")
	p.Expected, p.Processed = 10, 7
	for _, id := range []string{"m-1", "m-2", "m-3"} {
		p.Missing.add(id, 2)
	}
	p.Duplicates.add("m-9", 2)
	tr.Repair = &RepairReport{}
	tr.Repair.Repairable.add("m-1", 2)
	r.Tables = []*TableReport{tr}
	r.Consumers = []*ConsumerReport{{Consumer: "inventory", InboxRows: 8}}
	r.Consumers[0].Orphans.add("x-1", 2)
	r.count()
	if r.Differences != 6 {
		t.Fatalf("differences %d, want 6", r.Differences)
	}
	var out bytes.Buffer
	r.Text(&out)
	for _, want := range []string{"sent, never processed", "shop.producer_message -> inventory (3): m-1, m-2 ... and 1 more",
		"processed more than once", "m-9", "pending too long", "p-1", "processed, no outbox row", "x-1",
		"--repair would reset to pending 1 rows", "6 differences"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := r.JSON(&out); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Differences int64 `json:"differences"`
		Tables      []struct {
			Failed IDs `json:"failed"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Differences != 6 {
		t.Fatalf("json: %v %+v", err, back)
	}
	if !strings.Contains(out.String(), `"failed": {
        "count": 0,
        "ids": []`) {
		t.Errorf("no ids is not []:\n%s", out.String())
	}
}

// New refuses a reconcile section Parse would not have let through, by its
// YAML key, before reading anything.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	cfg := &config.Config{Name: "x", Reconcile: config.Reconcile{Window: 24 * time.Hour, PendingAfter: time.Minute, ChunkSize: 10}}
	if _, err := New(cfg, nil, nil, nil, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "reconcile.chunk_size: 10") {
		t.Fatalf("error %v, want one naming reconcile.chunk_size", err)
	}
}

package chaos

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// history builds a small history: three transactions on two keys, every
// row delivered once through the queue in commit order, and one fault
// (a broker reset at 10 s, bound 5).
func history() *History {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	h := &History{Start: t0, End: map[string]EndRow{}, Table: "producer_message"}
	rows := []Row{
		{ID: "m1", Key: "k1", Body: body("k1", 1, 0, ""), Expect: Deliver},
		{ID: "m2", Key: "k1", Body: body("k1", 2, 0, ""), Expect: Deliver},
		{ID: "m3", Key: "k2", Body: body("k2", 3, 0, ""), Expect: Deliver},
	}
	for i, r := range rows {
		h.Txs = append(h.Txs, Tx{Seq: i + 1, Kind: "insert", At: at(float64(i + 1)), Outcome: Committed, Rows: []Row{r}})
		h.Deliveries = append(h.Deliveries, Delivery{Src: "queue", N: i, ID: r.ID, Body: r.Body, At: at(float64(i) + 1.5)})
		h.End[r.ID] = EndRow{Table: "producer_message", Status: "SENT"}
	}
	h.Faults = []FaultEvent{{Kind: "broker-reset", Start: at(10), End: at(12), Bound: 5}}
	return h
}

// deliver adds a delivery of id (as its version 0 was committed) at s
// seconds.
func deliver(h *History, id string, s float64, redelivered bool) {
	var b string
	for _, tx := range h.Txs {
		for _, r := range tx.Rows {
			if r.ID == id {
				b = r.Body
			}
		}
	}
	h.Deliveries = append(h.Deliveries, Delivery{Src: "queue", N: len(h.Deliveries), ID: id, Body: b,
		At: h.Start.Add(time.Duration(s * float64(time.Second))), Redelivered: redelivered})
}

// Each rule of the checker, shown on a history that breaks it and only it:
// a checker that passes anything would fail here.
func TestCheckerFindsWhatEachHistoryBreaks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *History)
		want   string // the start of the one problem line, "" for none
	}{
		{"every row once, in order", func(*History) {}, ""},
		{"a row never delivered", func(h *History) { h.Deliveries = h.Deliveries[:2] }, "lost: 1"},
		{"a row never delivered but FAILED, as it must when its route is gone", func(h *History) {
			h.Deliveries = h.Deliveries[:2]
			h.Txs[2].Rows[0].Expect = Fail
			h.End["m3"] = EndRow{Table: "producer_message", Status: "FAILED", Error: "NOT_FOUND - no exchange"}
		}, ""},
		{"a row FAILED although its route exists", func(h *History) {
			h.Deliveries = h.Deliveries[:2]
			h.End["m3"] = EndRow{Table: "producer_message", Status: "FAILED", Error: "gave up"}
		}, "failed: 1"},
		{"a row FAILED without a reason", func(h *History) {
			h.Deliveries = h.Deliveries[:2]
			h.Txs[2].Rows[0].Expect = Fail
			h.End["m3"] = EndRow{Table: "producer_message", Status: "FAILED"}
		}, "failed: 1"},
		{"duplicates within the fault's bound", func(h *History) {
			deliver(h, "m1", 11, false)
			deliver(h, "m2", 11, false)
		}, ""},
		{"duplicates over the fault's bound", func(h *History) {
			h.Faults[0].Bound = 1
			deliver(h, "m1", 11, false)
			deliver(h, "m2", 11, false)
		}, "duplicates after broker-reset: 2, over the bound in broker-reset at 10.0s: 2 > 1"},
		{"a duplicate no fault explains", func(h *History) { deliver(h, "m1", 5, false) }, "duplicates after none: 1"},
		{"a consumer's own redelivery is not a duplicate", func(h *History) { deliver(h, "m1", 5, true) }, ""},
		{"a rolled-back row delivered", func(h *History) {
			h.Txs = append(h.Txs, Tx{Kind: "insert", Outcome: RolledBack, Rows: []Row{{ID: "m4", Key: "k1", Body: "x", Expect: Deliver}}})
			h.Deliveries = append(h.Deliveries, Delivery{Src: "queue", N: 9, ID: "m4", Body: "x", At: h.Start.Add(20 * time.Second)})
		}, "rolled back delivered: 1"},
		{"a row cancelled in its transaction delivered", func(h *History) {
			h.Txs[1].Rows[0].Expect = Never
			h.End["m2"] = EndRow{Table: "producer_message", Status: "CANCELLED"}
		}, "never to deliver, delivered: 1"},
		{"a draft delivered before the committed body", func(h *History) {
			h.Deliveries = append(h.Deliveries, Delivery{Src: "queue", N: 9, ID: "m1", Body: `{"draft":true}`, At: h.Start})
		}, "drafts: 1"},
		{"the same document in MySQL's JSON text is no draft", func(h *History) {
			h.Deliveries[0].Body = strings.ReplaceAll(strings.ReplaceAll(h.Deliveries[0].Body, `":`, `": `), `,"`, `, "`)
		}, ""},
		{"an id nobody wrote delivered", func(h *History) {
			h.Deliveries = append(h.Deliveries, Delivery{Src: "queue", N: 9, ID: "zz", Body: "x", At: h.Start.Add(time.Second)})
		}, "unknown ids delivered: 1"},
		{"two rows of a key delivered out of commit order", func(h *History) {
			h.Deliveries[0].N, h.Deliveries[1].N = 1, 0
			h.Deliveries[0].At, h.Deliveries[1].At = h.Deliveries[1].At, h.Deliveries[0].At
		}, "order per key: 1"},
		{"rows of two keys interleaved", func(h *History) {
			h.Deliveries[1].N, h.Deliveries[2].N = 2, 1
		}, ""},
		{"a failed row archived away with its retry recorded, as documented", func(h *History) {
			h.Deliveries = h.Deliveries[:2]
			h.Txs[2].Rows[0].Expect = Fail
			h.End["m3"] = EndRow{Table: "producer_message_arch_1", Status: "PENDING", Error: "NOT_FOUND - no exchange"}
		}, ""},
		{"a failed row archived away with its failure recorded nowhere", func(h *History) {
			h.Deliveries = h.Deliveries[:2]
			h.Txs[2].Rows[0].Expect = Fail
			h.End["m3"] = EndRow{Table: "producer_message_arch_1", Status: "PENDING"}
		}, "left pending: 1"},
		{"a row delivered and left PENDING", func(h *History) { h.End["m1"] = EndRow{Table: "producer_message", Status: "PENDING"} }, "left pending: 1"},
		{"a re-queue delivered again is no duplicate", func(h *History) {
			r := Row{ID: "m1", Key: "k1", Version: 1, Body: body("k1", 1, 1, "requeued"), Expect: Deliver}
			h.Txs = append(h.Txs, Tx{Seq: 4, Kind: "requeue", At: h.Start.Add(20 * time.Second), Outcome: Committed, Rows: []Row{r}})
			h.Deliveries = append(h.Deliveries, Delivery{Src: "queue", N: 3, ID: "m1", Body: r.Body, At: h.Start.Add(21 * time.Second)})
		}, ""},
		{"a re-queue never delivered", func(h *History) {
			r := Row{ID: "m1", Key: "k1", Version: 1, Body: body("k1", 1, 1, "requeued"), Expect: Deliver}
			h.Txs = append(h.Txs, Tx{Seq: 4, Kind: "requeue", At: h.Start.Add(20 * time.Second), Outcome: Committed, Rows: []Row{r}})
		}, "lost: 1"},
		{"a leader deposed while paused publishes after it wakes", func(h *History) {
			h.Woken = []Woken{{Relay: 0, At: h.Start.Add(5 * time.Second), Until: h.Start.Add(11 * time.Second), Publishes: 3}}
		}, "a leader deposed while paused published after it woke: 1"},
		{"a leader deposed while paused that keeps quiet", func(h *History) {
			h.Woken = []Woken{{Relay: 0, At: h.Start.Add(5 * time.Second), Until: h.Start.Add(11 * time.Second)}}
		}, ""},
		{"into a stream, a row only the sweeper sent", func(h *History) {
			h.Schedule.Config.Stream = true
			for i := range h.Deliveries[:2] {
				h.Deliveries[i].Src = "stream"
			}
		}, "not into the stream (sent by the sweeper over AMQP only): 1"},
		{"an unsettled commit is judged neither way", func(h *History) {
			h.Txs = append(h.Txs, Tx{Seq: 4, Kind: "insert", Outcome: Unknown, Rows: []Row{{ID: "m9", Key: "k1", Body: "y", Expect: Deliver}}})
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := history()
			tc.change(h)
			r := Check(h)
			got := r.Problems()
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("problems %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
				t.Fatalf("problems %q, want one starting %q", got, tc.want)
			}
		})
	}
}

// A replay is charged to the last fault still going on at, or begun
// after, the row's first delivery (the kill), never to one long over
// before the row was first published; what was left behind (lost, left
// pending, swept again a grace period later) to the fault going on at the
// row's commit, or else the first one after it.
func TestBlameChargesTheFaultThatCausedIt(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	faults := []FaultEvent{
		{Kind: "replica-failover", Start: at(1), End: at(3)},
		{Kind: "relay-kill", Start: at(10), End: at(10.5)},
		{Kind: "broker-blackhole", Start: at(20), End: at(30)},
	}
	ends := []time.Time{faults[0].End, faults[1].End, faults[2].End}
	for _, tc := range []struct {
		first, dup float64
		want       int
	}{
		{5, 11, 1},   // published before the kill, again after it
		{9.5, 12, 1}, // just before
		{25, 31, 2},  // held in the blackhole, published again after it
		{2, 12, 1},   // first delivered during the failover, replayed after the kill: the kill's
		{35, 36, -1}, // no fault after it
	} {
		if got := blame(faults, ends, at(tc.first), at(tc.dup)); got != tc.want {
			t.Errorf("first %.1fs, duplicate %.1fs: blamed %d, want %d", tc.first, tc.dup, got, tc.want)
		}
	}
	for _, tc := range []struct {
		commit, seen float64
		want         int
	}{
		{2, 70, 0},   // committed during the failover
		{9.9, 70, 1}, // just before the kill
		{25, 90, 2},  // during the blackhole, though the kill's catch-up may still run
		{31, 32, -1}, // nothing after it
	} {
		if got := blameCommit(faults, at(tc.commit), at(tc.seen)); got != tc.want {
			t.Errorf("committed %.1fs, seen %.1fs: blamed %d, want %d", tc.commit, tc.seen, got, tc.want)
		}
	}
}

// A fault is in effect until the rows committed before its recovery were
// delivered: a duplicate sent while a paused relay catches up is the
// pause's, however long after SIGCONT.
func TestBlameCoversTheCatchUp(t *testing.T) {
	h := history()
	h.Faults = []FaultEvent{{Kind: "relay-pause", Start: h.Start.Add(4 * time.Second), End: h.Start.Add(5 * time.Second), Bound: 0}}
	h.Txs[2].At = h.Start.Add(4500 * time.Millisecond) // committed during the pause
	h.Deliveries[2].At = h.Start.Add(30 * time.Second) // delivered long after it
	deliver(h, "m3", 31, false)
	r := Check(h)
	if d := r.Duplicates["relay-pause"]; d == nil || d.Dups != 1 {
		t.Fatalf("duplicates %v, want the one after the catch-up charged to relay-pause (%v)", r.Duplicates["relay-pause"], r.Dups)
	}
}

// A seed draws one schedule, whatever else: make chaos SEED=... replays it.
func TestDrawIsASeedsOwn(t *testing.T) {
	for _, c := range Matrix() {
		a := Draw(42, c, longProfile, "mysql-9.7")
		b := Draw(42, c, longProfile, "mysql-9.7")
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two draws of seed 42 differ:\n%+v\n%+v", c, a, b)
		}
		if len(a.Faults) == 0 {
			t.Fatalf("%s: seed 42 draws no fault", c)
		}
		for _, p := range a.Faults {
			if !byName(p.Kind).Available(&a) {
				t.Errorf("%s: drew %s, which does not apply", c, p.Kind)
			}
			if p.At+p.Hold > a.Duration {
				t.Errorf("%s: %s ends after the schedule", c, p)
			}
		}
		if c2, err := ParseConfig(c.String()); err != nil || c2 != c {
			t.Errorf("%s does not parse back: %v %v", c, c2, err)
		}
	}
	if reflect.DeepEqual(Draw(1, Matrix()[0], longProfile, "x").Faults, Draw(2, Matrix()[0], longProfile, "x").Faults) {
		t.Error("seeds 1 and 2 draw the same faults")
	}
}

// Traffic.Payload fills a body's pad up to its size with valid JSON and no
// draw; 0 leaves the body as drawn.
func TestSizedBodies(t *testing.T) {
	for _, pad := range []string{"", "caf\u00e9 \U0001F600 xx"} {
		for _, size := range []int{0, 10, 128 << 10} {
			w := &writer{e: &env{s: &Schedule{Traffic: Traffic{Payload: size}}}, rng: rand.New(rand.NewPCG(1, 2))}
			b := w.sized("k01", 7, pad)
			switch {
			case size <= len(body("k01", 7, 0, pad)) && b != body("k01", 7, 0, pad):
				t.Errorf("payload %d, pad %q: %q, want the body as drawn", size, pad, b)
			case size > len(body("k01", 7, 0, pad)) && len(b) != size:
				t.Errorf("payload %d, pad %q: %d bytes", size, pad, len(b))
			case !json.Valid([]byte(b)):
				t.Errorf("payload %d, pad %q: not JSON: %.80q", size, pad, b)
			}
			if got, want := w.rng.Uint64(), rand.New(rand.NewPCG(1, 2)).Uint64(); got != want {
				t.Errorf("payload %d: sized drew from the writer's rng", size)
			}
		}
	}
}

// make test's fixed schedules draw at least what the chaos suite ran
// before the harness, on three configurations, in about a minute and a half
// of traffic.
func TestFixedSeedsCover(t *testing.T) {
	var ss []Schedule
	var total time.Duration
	for _, f := range fixed {
		c, err := ParseConfig(f.config)
		if err != nil {
			t.Fatal(err)
		}
		s := Draw(f.seed, c, shortProfile, "mariadb-10.11")
		ss = append(ss, s)
		total += s.Duration
		t.Logf("seed %d %s: %s", f.seed, c, s.FaultNames())
	}
	kinds := kindsOf(ss)
	for _, k := range []string{"relay-kill", "leader-kill-takeover", "broker-reset", "redis-restart", "redis-cut", "replica-failover"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("the fixed seeds draw no %s (they draw %v): pick others", k, kinds)
		}
	}
	if total > 100*time.Second {
		t.Errorf("the fixed schedules write for %s, over make test's budget", total)
	}
}

// Every named scenario's faults apply to its configuration and topology,
// and end before its writer stops.
func TestScenariosApply(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range scenarios {
		if seen[sc.Name] {
			t.Errorf("two scenarios named %s", sc.Name)
		}
		seen[sc.Name] = true
		for _, p := range sc.Faults {
			if !byName(p.Kind).Available(&sc.Schedule) {
				t.Errorf("%s: %s does not apply to %s", sc.Name, p.Kind, sc.Config)
			}
			if p.At+p.Hold > sc.Duration {
				t.Errorf("%s: %s ends after the writer", sc.Name, p)
			}
		}
	}
}

// publishTap passes AMQP frames on byte for byte and notes basic.publish
// only (class 60, method 40), not the other methods, headers or bodies.
func TestPublishTapCountsBasicPublish(t *testing.T) {
	frame := func(typ byte, payload []byte) []byte {
		f := []byte{typ, 0, 1, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(f[3:], uint32(len(payload)))
		return append(append(f, payload...), 0xCE)
	}
	stream := []byte("AMQP\x00\x00\x09\x01")
	stream = append(stream, frame(1, []byte{0, 60, 0, 40, 0, 0})...)   // basic.publish
	stream = append(stream, frame(2, []byte{0, 60, 0, 0, 1, 2, 3})...) // its content header
	stream = append(stream, frame(3, []byte("body"))...)               // its body
	stream = append(stream, frame(1, []byte{0, 60, 0, 80, 1})...)      // basic.ack
	stream = append(stream, frame(1, []byte{0, 60, 0, 40, 9, 9})...)   // another publish
	var server bytes.Buffer
	n := 0
	publishTap(func() { n++ })(&server, bytes.NewReader(stream))
	if !bytes.Equal(server.Bytes(), stream) {
		t.Fatalf("the tap passed on %q, want %q", server.Bytes(), stream)
	}
	if n != 2 {
		t.Fatalf("%d publishes noted, want 2", n)
	}
}

package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// Rows to 1,000 distinct exchanges, through the relay: every row arrives,
// /metrics shows at most metrics.max_label_values exchange series plus
// "other", and the counts add up to the rows.
func TestMetricsExchangeSeriesBoundedThroughRelay(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, names and proxies; no server restarted (main_test.go)
	const exchanges, limit = 1000, 20
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	table := db.Name + ".producer_message"

	// One connection for all of them: the broker is shared with other tests.
	_, ch := testenv.Dial(t)
	names := make([]string, exchanges)
	prefix := testenv.UniqueName("ex_many")
	t.Cleanup(func() {
		for _, n := range names {
			_ = ch.ExchangeDelete(n, false, false)
		}
	})
	for i := range names {
		names[i] = fmt.Sprintf("%s_%04d", prefix, i)
		if err := ch.ExchangeDeclare(names[i], "topic", true, false, false, false, nil); err != nil {
			t.Fatalf("declaring %s: %v", names[i], err)
		}
		if err := ch.QueueBind(br.Queue, "#", names[i], false, nil); err != nil {
			t.Fatalf("binding %s: %v", names[i], err)
		}
	}
	r := relaytest.StartRelay(t, opsYAML(testenv.UniqueName("bounded"), relaytest.SeedTable(db.Name),
		map[string]string{"metrics": fmt.Sprintf("{max_label_values: %d}", limit)}))
	base := httpAddr(t, r.App)

	for start := 0; start < exchanges; start += 100 {
		db.Exec(t, outboxInsert(start, start+100, func(i int) string { return fmt.Sprintf("('bnd-%04d', '%s', 'k', '{}')", i, names[i]) }))
	}
	testenv.Eventually(t, 90*time.Second, func() bool { return got.Len() >= exchanges }, "received %d of %d", got.Len(), exchanges)
	if distinct, dups := got.Distinct(); distinct != exchanges {
		t.Fatalf("%d distinct messages (%d duplicates), want %d", distinct, dups, exchanges)
	}

	var series int
	var total float64
	testenv.Eventually(t, 10*time.Second, func() bool {
		fams, _ := scrape(t, base)
		total, _ = value(fams, "binlog_relay_messages_published_total", "table", table)
		series = 0
		if f := fams["binlog_relay_messages_published_total"]; f != nil {
			series = len(f.GetMetric())
		}
		return total == exchanges
	}, "published_total sums to %v, want %d", total, exchanges)
	fams, body := scrape(t, base)
	if series > limit+1 {
		t.Errorf("%d exchange series for %d exchanges, want at most %d + other:\n%s", series, exchanges, limit, excerpt(body))
	}
	other, ok := value(fams, "binlog_relay_messages_published_total", "table", table, "exchange", metrics.OtherLabelValue)
	if !ok || other < exchanges-limit {
		t.Errorf("exchange=other counted %v (present %v), want at least %d", other, ok, exchanges-limit)
	}
	t.Logf("%d exchanges: %d published series, other = %v, total = %v", exchanges, series, other, total)
}

// Five binlog rotations on the source replica while the relay streams keep
// one position series: the file's number moves, no series is left behind.
func TestBinlogPositionOneSeriesAcrossRotations(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	r := relaytest.StartRelay(t, opsYAML(testenv.UniqueName("rotate"), relaytest.SeedTable(db.Name), nil))
	base := httpAddr(t, r.App)

	want := insertOrders(t, db, br.Exchange, "rot0", 1, 10)
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= len(want) }, "received %d of %d", got.Len(), len(want))
	fams, _ := scrape(t, base)
	first, ok := value(fams, "binlog_relay_binlog_file_sequence")
	if !ok {
		t.Fatal("binlog_relay_binlog_file_sequence missing before the rotations")
	}

	replica := testenv.Open(t, testenv.ReplicaDSN, "")
	for i := 1; i <= 5; i++ {
		// LOCAL: the replica writes no event of its own (gtid_strict_mode).
		if _, err := replica.Exec("FLUSH LOCAL BINARY LOGS"); err != nil {
			t.Fatalf("rotation %d: %v", i, err)
		}
		want = append(want, insertOrders(t, db, br.Exchange, fmt.Sprintf("rot%d", i), 1, 10)...)
		testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= len(want) }, "after rotation %d: received %d of %d", i, got.Len(), len(want))
	}

	// The checkpoint follows the stream once the last rows are marked SENT.
	var seq, cpSeq float64
	testenv.Eventually(t, 20*time.Second, func() bool {
		fams, _ = scrape(t, base)
		seq, _ = value(fams, "binlog_relay_binlog_file_sequence")
		cpSeq, _ = value(fams, "binlog_relay_checkpoint_file_sequence")
		return seq >= first+5 && cpSeq >= first+5
	}, "binlog file number went from %v to %v (checkpoint %v) over 5 rotations", first, seq, cpSeq)
	fams, body := scrape(t, base)
	for _, name := range []string{"binlog_relay_binlog_file_sequence", "binlog_relay_binlog_offset",
		"binlog_relay_checkpoint_file_sequence", "binlog_relay_checkpoint_offset"} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Errorf("%s: want exactly one series after 5 rotations:\n%s", name, excerpt(body))
			continue
		}
		// Only the relay's name, the same on every series of a process.
		for _, l := range f.GetMetric()[0].GetLabel() {
			if l.GetName() != "name" {
				t.Errorf("%s carries label %s=%q", name, l.GetName(), l.GetValue())
			}
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "binlog_file" {
					t.Errorf("%s still has a binlog_file label", name)
				}
			}
		}
	}
	if distinct, dups := got.Distinct(); distinct != len(want) {
		t.Errorf("%d distinct messages (%d duplicates), want %d", distinct, dups, len(want))
	}
	off, _ := value(fams, "binlog_relay_binlog_offset")
	t.Logf("file number %v -> %v over 5 rotations, offset %v, one series each", first, seq, off)
}

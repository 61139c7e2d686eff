package metrics

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// Rows to 1,000 distinct exchanges make at most max_label_values exchange
// series plus "other"; every row is still counted, the row-counter cache
// stays bounded, and one warning names the label.
func TestMetricsExchangeLabelBounded(t *testing.T) {
	const limit, exchanges, perExchange = 25, 1000, 3
	core, logs := observer.New(zapcore.WarnLevel)
	m := NewWith(Config{MaxLabelValues: limit}, zap.New(core))
	tb := seedTable(t)

	for i := range exchanges {
		ex := fmt.Sprintf("tenant-%04d", i)
		for range perExchange {
			m.Published(tb, ex, time.Millisecond, 0)
		}
		m.Failed(tb, ex, publisher.ErrReturned)
	}

	for _, c := range []struct {
		name string
		want int
	}{
		{"binlog_relay_messages_published_total", limit + 1},
		{"binlog_relay_messages_failed_total", limit + 1},
		{"binlog_relay_messages_returned_total", limit + 1},
	} {
		n, err := testutil.GatherAndCount(m.Registry(), c.name)
		if err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("%s has %d series after %d exchanges, want %d (%d exchanges + other)", c.name, n, exchanges, c.want, limit)
		}
	}
	// Nothing is lost: what did not get a series of its own is under other.
	if got := testutil.ToFloat64(m.published.WithLabelValues("shop.producer_message", "tenant-0000")); got != perExchange {
		t.Errorf("first exchange counted %v, want %d", got, perExchange)
	}
	wantOther := float64((exchanges - limit) * perExchange)
	if got := testutil.ToFloat64(m.published.WithLabelValues("shop.producer_message", OtherLabelValue)); got != wantOther {
		t.Errorf("published{exchange=other} = %v, want %v", got, wantOther)
	}
	if got := testutil.ToFloat64(m.failed.WithLabelValues("shop.producer_message", OtherLabelValue, "returned")); got != exchanges-limit {
		t.Errorf("failed{exchange=other} = %v, want %d", got, exchanges-limit)
	}

	// The maps behind the series are bounded too (measured).
	if n := m.exchange.size(); n != limit {
		t.Errorf("admitted exchange values = %d, want %d", n, limit)
	}
	counters := 0
	m.rowCounters.Range(func(any, any) bool { counters++; return true })
	if counters != limit+1 {
		t.Errorf("row counter cache holds %d entries, want %d", counters, limit+1)
	}
	t.Logf("1000 exchanges: %d published series, %d admitted label values, %d cached counters", limit+1, m.exchange.size(), counters)

	warns := logs.FilterField(zap.String("label", "exchange")).All()
	if len(warns) != 1 {
		t.Fatalf("got %d warnings naming the exchange label, want 1: %v", len(warns), logs.All())
	}
	if f := warns[0].ContextMap(); f["first_value_over"] != fmt.Sprintf("tenant-%04d", limit) || f["max_label_values"] != int64(limit) {
		t.Errorf("warning fields = %v", f)
	}
}

// The default bound is 100, and concurrent callers never admit more.
func TestMetricsExchangeLabelDefaultBoundConcurrent(t *testing.T) {
	m := New()
	tb := seedTable(t)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				m.Published(tb, fmt.Sprintf("ex-%d-%d", w, i), 0, 0)
			}
		}()
	}
	wg.Wait()
	n, err := testutil.GatherAndCount(m.Registry(), "binlog_relay_messages_published_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != DefaultMaxLabelValues+1 {
		t.Errorf("%d series, want %d", n, DefaultMaxLabelValues+1)
	}
	if got := testutil.ToFloat64(m.published.WithLabelValues("shop.producer_message", OtherLabelValue)); got != 8*500-DefaultMaxLabelValues {
		t.Errorf("other = %v, want %d", got, 8*500-DefaultMaxLabelValues)
	}
}

func TestMetricsFileSequence(t *testing.T) {
	for _, c := range []struct {
		file string
		want uint64
		ok   bool
	}{
		{"binlog.000042", 42, true}, {"mysql-bin.000001", 1, true}, {"host.name-bin.1000000", 1000000, true},
		{"binlog", 0, false}, {"binlog.", 0, false}, {"binlog.index", 0, false},
	} {
		got, ok := FileSequence(c.file)
		if got != c.want || ok != c.ok {
			t.Errorf("FileSequence(%q) = %d, %v; want %d, %v", c.file, got, ok, c.want, c.ok)
		}
	}
}

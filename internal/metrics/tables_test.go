package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// N+k tables matched by one pattern entry make at most N per-table series
// plus one under the entry's pattern, on every per-table metric; the
// aggregate holds exactly the rows of the k tables past N, so no row is
// lost from the sums; a table named in the config keeps its own series
// past the bound; one warning names the setting.
func TestMetricsTableSeriesBounded(t *testing.T) {
	const limit, extra = 10, 15
	core, logs := observer.New(zapcore.WarnLevel)
	m := NewWith(Config{MaxTableSeries: limit}, zap.New(core))
	entry := outboxtest.Preset(t, "producer-message", "tenant_*", nil)
	pattern := entry.FullName()

	var tables []*outbox.Table
	for i := range limit + extra {
		tables = append(tables, entry.Matched(fmt.Sprintf("tenant_%03d", i), entry.Name))
	}
	want := map[string]float64{} // label -> rows published
	for i, tb := range tables {
		rows := i + 1
		for range rows {
			m.Published(tb, "orders", time.Millisecond, 0)
		}
		m.Marked(tb, int64(rows))
		m.SweeperClaims(tb, 2)
		m.HeaderOmitted(tb, "traceparent")
		label := tb.FullName()
		if i >= limit {
			label = pattern
		}
		want[label] += float64(rows)
	}
	fixed := seedTable(t) // shop.producer_message, named in the config
	m.Published(fixed, "orders", time.Millisecond, 0)
	m.Marked(fixed, 1)

	for _, name := range []string{"binlog_relay_messages_published_total", "binlog_relay_rows_marked_sent_total", "binlog_relay_mark_statements_total"} {
		if n := testutil.CollectAndCount(m.Registry(), name); n != limit+2 {
			t.Errorf("%s: %d series, want %d (%d tables, the entry's aggregate, the configured table)", name, n, limit+2, limit)
		}
	}
	for _, name := range []string{"binlog_relay_sweeper_claims_total", "binlog_relay_headers_omitted_total"} {
		if n := testutil.CollectAndCount(m.Registry(), name); n != limit+1 {
			t.Errorf("%s: %d series, want %d", name, n, limit+1)
		}
	}
	var sum float64
	for label, rows := range want {
		if got := testutil.ToFloat64(m.published.WithLabelValues(label, "orders")); got != rows {
			t.Errorf("published{table=%q} = %v, want %v", label, got, rows)
		}
		if got := testutil.ToFloat64(m.marked.WithLabelValues(label)); got != rows {
			t.Errorf("marked{table=%q} = %v, want %v", label, got, rows)
		}
		sum += rows
	}
	if all := float64((limit + extra) * (limit + extra + 1) / 2); sum != all {
		t.Errorf("rows over the series %v, want %v", sum, all)
	}
	if got := testutil.ToFloat64(m.claims.WithLabelValues(pattern)); got != 2*extra {
		t.Errorf("claims under %s = %v, want %d", pattern, got, 2*extra)
	}
	if got := testutil.ToFloat64(m.published.WithLabelValues(fixed.FullName(), "orders")); got != 1 {
		t.Errorf("configured table past the bound: published = %v, want its own series with 1", got)
	}
	if m.tables.size() != limit {
		t.Errorf("%d tables admitted, want %d", m.tables.size(), limit)
	}
	if w := logs.FilterMessageSnippet("max_table_series").All(); len(w) != 1 {
		t.Errorf("%d warnings naming max_table_series, want 1", len(w))
	}
}

// The backlog gauges of tables counted under their entry add up (row
// counts), take the worst (oldest pending, retry ratio) and the stalest
// query time, whatever order the tables are polled in.
func TestMetricsBacklogAggregated(t *testing.T) {
	m := NewWith(Config{MaxTableSeries: 1}, zap.NewNop())
	entry := outboxtest.Preset(t, "producer-message", "tenant_*", nil)
	var qs []*tableQueries
	for i := range 4 {
		tb := entry.Matched(fmt.Sprintf("tenant_%d", i), entry.Name)
		q, ok := BacklogQueries(tb)
		if !ok {
			t.Fatal("no backlog queries for the preset")
		}
		q.label, q.aggregate = m.tables.label(tb)
		qs = append(qs, &q)
	}
	if qs[0].aggregate || !qs[1].aggregate {
		t.Fatalf("first table aggregate=%v, second %v; want own series, then the entry", qs[0].aggregate, qs[1].aggregate)
	}
	for i, q := range qs {
		g := m.backlogGauges(q)
		g.rows(StatusPending, float64(10*(i+1)))
		g.oldest(float64(i * 7 % 5)) // 0, 2, 4, 1
		g.ratio(float64(i) / 10)
		g.queried(float64(1000 - i))
	}
	// Polled again: a table's new value replaces its old one.
	m.backlogGauges(qs[3]).rows(StatusPending, 5)
	p := entry.FullName()
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"own table's pending rows", testutil.ToFloat64(m.outboxRows.WithLabelValues(qs[0].table, StatusPending)), 10},
		{"entry's pending rows (20+30+5)", testutil.ToFloat64(m.outboxRows.WithLabelValues(p, StatusPending)), 55},
		{"entry's oldest pending (max)", testutil.ToFloat64(m.oldestPending.WithLabelValues(p)), 4},
		{"entry's retry ratio (max)", testutil.ToFloat64(m.retryRatio.WithLabelValues(p)), 0.3},
		{"entry's last query (stalest)", testutil.ToFloat64(m.outboxLastQuery.WithLabelValues(p)), 997},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

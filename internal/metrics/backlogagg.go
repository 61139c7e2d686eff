package metrics

import (
	"maps"
	"slices"
	"sync"
)

// backlogAggregate holds the last backlog values of each table counted
// under its entry's pattern (metrics.max_table_series), so the entry's
// gauges can be set from all of them: a gauge cannot be added to like a
// counter, and setting it from the table polled last would show one
// table's value as the entry's. Per entry: outbox_rows is the sum over its
// tables, outbox_oldest_pending_age_seconds and outbox_retry_ratio the
// highest, outbox_last_query_timestamp_seconds the oldest (the stalest
// table's), so an alert on any of them fires when one table would fire it.
type backlogAggregate struct {
	mu      sync.Mutex
	entries map[string]map[string]*tableBacklog // label -> table -> values
}

type tableBacklog struct {
	rows    map[string]float64 // status label -> count
	oldest  float64
	ratio   float64
	queried float64
	has     struct{ oldest, ratio, queried bool }
}

func newBacklogAggregate() *backlogAggregate {
	return &backlogAggregate{entries: map[string]map[string]*tableBacklog{}}
}

// backlogSetter sets one table's backlog gauges: directly for a table with
// series of its own, through the aggregate for one counted under its entry.
type backlogSetter struct {
	m *Metrics
	q *tableQueries
}

func (m *Metrics) backlogGauges(q *tableQueries) backlogSetter { return backlogSetter{m, q} }

func (s backlogSetter) rows(status string, n float64) {
	if !s.q.aggregate {
		s.m.outboxRows.WithLabelValues(s.q.label, status).Set(n)
		return
	}
	s.update(func(t *tableBacklog) { t.rows[status] = n })
}

func (s backlogSetter) oldest(age float64) {
	if !s.q.aggregate {
		s.m.oldestPending.WithLabelValues(s.q.label).Set(age)
		return
	}
	s.update(func(t *tableBacklog) { t.oldest, t.has.oldest = age, true })
}

func (s backlogSetter) ratio(r float64) {
	if !s.q.aggregate {
		s.m.retryRatio.WithLabelValues(s.q.label).Set(r)
		return
	}
	s.update(func(t *tableBacklog) { t.ratio, t.has.ratio = r, true })
}

func (s backlogSetter) queried(at float64) {
	if !s.q.aggregate {
		s.m.outboxLastQuery.WithLabelValues(s.q.label).Set(at)
		return
	}
	s.update(func(t *tableBacklog) { t.queried, t.has.queried = at, true })
}

// update changes one table's values and sets the entry's gauges again from
// every table under it. Cost: one pass over the entry's tables per value,
// a few thousand additions per poll at 1,000 tables, next to a query each.
func (s backlogSetter) update(change func(*tableBacklog)) {
	a := s.m.backlog
	a.mu.Lock()
	defer a.mu.Unlock()
	tables := a.entries[s.q.label]
	if tables == nil {
		tables = map[string]*tableBacklog{}
		a.entries[s.q.label] = tables
	}
	t := tables[s.q.table]
	if t == nil {
		t = &tableBacklog{rows: map[string]float64{}}
		tables[s.q.table] = t
	}
	change(t)

	sums := map[string]float64{}
	var oldest, ratio, queried float64
	var hasOldest, hasRatio, hasQueried bool
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		t := tables[name]
		for st, n := range t.rows {
			sums[st] += n
		}
		if t.has.oldest {
			oldest, hasOldest = max(oldest, t.oldest), true
		}
		if t.has.ratio {
			ratio, hasRatio = max(ratio, t.ratio), true
		}
		if t.has.queried {
			if !hasQueried || t.queried < queried {
				queried = t.queried
			}
			hasQueried = true
		}
	}
	m, label := s.m, s.q.label
	for st, n := range sums {
		m.outboxRows.WithLabelValues(label, st).Set(n)
	}
	if hasOldest {
		m.oldestPending.WithLabelValues(label).Set(oldest)
	}
	if hasRatio {
		m.retryRatio.WithLabelValues(label).Set(ratio)
	}
	if hasQueried {
		m.outboxLastQuery.WithLabelValues(label).Set(queried)
	}
}

package metrics

import (
	"sync"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// DefaultMaxTableSeries is how many tables matched by pattern entries keep
// series of their own when the config does not say
// (metrics.max_table_series).
const DefaultMaxTableSeries = 100

// tableLabels bounds the table label: every per-table metric (published,
// failed, marked, sweeper claims, the outbox backlog gauges, ...) is one
// series per table on every scrape, so an entry that matches 1,000 tenant
// schemas would put tens of thousands of series on each one. Tables named in
// the config always keep their own series (the config bounds them); tables a
// pattern entry matches take their own series while fewer than max of them
// have one, and after that are counted under their entry's pattern (for
// example "tenant_*.outbox_message"), which no real table name can equal. As
// with labelLimit, a table once admitted is never evicted, so no counter
// changes series half way.
type tableLabels struct {
	max int
	log *zap.Logger

	mu       sync.Mutex
	admitted map[string]struct{}
	warned   bool
}

func newTableLabels(max int, log *zap.Logger) *tableLabels {
	return &tableLabels{max: max, log: log, admitted: map[string]struct{}{}}
}

// label is the table label value to count t under, and whether that value
// is an aggregate over several tables (its entry's pattern).
func (l *tableLabels) label(t *outbox.Table) (string, bool) {
	name := t.FullName()
	if t.Entry == nil {
		return name, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.admitted[name]; ok {
		return name, false
	}
	if len(l.admitted) < l.max {
		l.admitted[name] = struct{}{}
		return name, false
	}
	if !l.warned {
		l.warned = true
		l.log.Warn("tables matched by patterns reached metrics.max_table_series; the per-table metrics of further tables are counted under their entry's pattern",
			zap.Int("max_table_series", l.max), zap.String("first_table_over", name), zap.String("entry", t.Entry.FullName()))
	}
	return t.Entry.FullName(), true
}

// size is how many matched tables have series of their own (for tests).
func (l *tableLabels) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.admitted)
}

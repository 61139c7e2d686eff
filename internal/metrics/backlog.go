package metrics

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Status names as they appear in the outbox_rows "status" label, whatever
// the table writes (a numeric status 0 is still PENDING here).
const (
	StatusPending = "PENDING"
	StatusSending = "SENDING"
	StatusFailed  = "FAILED"
)

// Backlog reads the outbox backlog from the replica on an interval: rows by
// status, the oldest PENDING row's age and the retry ratio. It never
// queries the primary: give it the replica's *sql.DB.
// Interval and RatioInterval are http.backlog_interval and
// http.retry_ratio_interval, which the config fills when unset.
type Backlog struct {
	DB       *sql.DB
	Tables   []*outbox.Table
	Interval time.Duration
	// RatioInterval spaces the retry ratio query: the one-hour window moves
	// slowly and the query reads every row updated in it.
	RatioInterval time.Duration
	Metrics       *Metrics
	Log           *zap.Logger
	// Current, when set, is asked for the tables before each poll instead
	// of Tables: those of pattern entries come and go while the relay
	// streams. A table gone stops being polled; its gauges keep their
	// last value.
	Current func() []*outbox.Table
}

// queriesFor keeps the statements of the tables now, reusing those built.
func (b *Backlog) queriesFor(tables []*outbox.Table, had []*tableQueries) []*tableQueries {
	byName := map[string]*tableQueries{}
	for _, q := range had {
		byName[q.table] = q
	}
	var out []*tableQueries
	for _, t := range tables {
		if q := byName[t.FullName()]; q != nil {
			out = append(out, q)
		} else if q, ok := BacklogQueries(t); ok {
			q.label, q.aggregate = b.Metrics.tables.label(t)
			out = append(out, &q)
		}
	}
	return out
}

// Run polls until ctx ends. The first poll is immediate.
func (b *Backlog) Run(ctx context.Context) error {
	queries := b.queriesFor(b.Tables, nil)
	if len(queries) == 0 && b.Current == nil {
		return nil
	}
	interval := b.Interval
	if interval <= 0 {
		return fmt.Errorf("backlog interval %s: must be positive", interval)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failing := map[string]bool{}
	for {
		if b.Current != nil {
			queries = b.queriesFor(b.Current(), queries)
		}
		timeout := max(interval, 10*time.Second)
		for i := 0; i < len(queries); i += BacklogBatch {
			chunk := queries[i:min(i+BacklogBatch, len(queries))]
			qctx, cancel := context.WithTimeout(ctx, timeout)
			err := b.pollBatch(qctx, chunk)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err == nil || len(chunk) == 1 {
				for _, q := range chunk {
					b.outcome(q, err, failing)
				}
				continue
			}
			// Asked again table by table, so one table's error (one just
			// dropped, or missing a column) stays its own and the others'
			// gauges go on.
			for _, q := range chunk {
				qctx, cancel := context.WithTimeout(ctx, timeout)
				err := b.pollBatch(qctx, []*tableQueries{q})
				cancel()
				if ctx.Err() != nil {
					return nil
				}
				b.outcome(q, err, failing)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// tableQueries is what the backlog reads of one table (pollBatch builds
// the statements).
type tableQueries struct {
	t     *outbox.Table
	table string
	// label is the table label its gauges go under: table, or its entry's
	// pattern when aggregate (metrics.max_table_series, tables.go).
	label     string
	aggregate bool

	statuses map[string]string // raw value as read back -> label
	// watched are the statuses counted; pending is the status whose oldest
	// row is aged, "" without a created column; ratioStatuses are those of
	// the retry ratio, none without retry and updated columns (pollBatch).
	watched, ratioStatuses []string
	pending                string
	// lastRetries is when the retry ratio was last read (see RatioInterval).
	lastRetries time.Time
}

// BacklogQueries decides what is read of a table; ok is false when the
// table has no status column or no status to watch (nothing to count).
// Each read uses the status index: counts and the oldest PENDING row are
// ranges on status, and the retry ratio is a range on (status, updated_at)
// for the statuses the relay knows.
func BacklogQueries(t *outbox.Table) (q tableQueries, ok bool) {
	s, c := t.Statuses, t.Columns
	if c.Status == "" {
		return q, false
	}
	q = tableQueries{t: t, table: t.FullName(), label: t.FullName(), statuses: map[string]string{}}
	var watched []string
	for _, st := range []struct{ value, label string }{{s.Pending, StatusPending}, {s.Sending, StatusSending}, {s.Failed, StatusFailed}} {
		if st.value != "" {
			q.statuses[st.value] = st.label
			watched = append(watched, st.value)
		}
	}
	if len(watched) == 0 {
		return q, false
	}
	q.watched = watched
	if s.Pending != "" && c.CreatedAt != "" {
		q.pending = s.Pending
	}
	if c.RetryCount != "" && c.UpdatedAt != "" {
		all := watched
		if s.Sent != "" {
			all = append(append([]string(nil), watched...), s.Sent)
		}
		q.ratioStatuses = all
	}
	return q, true
}

// BacklogBatch is how many tables' backlog one statement reads (UNION ALL):
// at 1,000 outbox tables, 10 statements an interval, not 2,000.
const BacklogBatch = 100

// outcome counts a table's failed poll and logs each change of its state
// once.
func (b *Backlog) outcome(q *tableQueries, err error, failing map[string]bool) {
	if err != nil {
		b.Metrics.outboxErrors.WithLabelValues(q.label).Inc()
		if !failing[q.table] {
			b.Log.Warn("outbox backlog query on the replica failed; backlog gauges are stale until it succeeds",
				zap.String("table", q.table), zap.Error(err))
		}
		failing[q.table] = true
		return
	}
	if failing[q.table] {
		b.Log.Info("outbox backlog query on the replica works again", zap.String("table", q.table))
	}
	failing[q.table] = false
}

// pollBatch reads the backlog of up to BacklogBatch tables in one
// statement (counts by status with the oldest row's age per status), and
// the retry ratio of those due in one more, then sets their gauges. An
// error sets none.
func (b *Backlog) pollBatch(ctx context.Context, chunk []*tableQueries) error {
	parts := make([]string, len(chunk))
	counts := make([]map[string]float64, len(chunk))
	oldest := make([]float64, len(chunk))
	for i, q := range chunk {
		parts[i] = outboxsql.BacklogSQL(q.t, q.watched, i)
		counts[i] = map[string]float64{}
		for _, label := range q.statuses {
			counts[i][label] = 0
		}
	}
	rows, err := b.DB.QueryContext(ctx, strings.Join(parts, " UNION ALL "))
	if err != nil {
		return fmt.Errorf("counting rows by status: %w", err)
	}
	for rows.Next() {
		var (
			i   int
			raw string
			n   int64
			age sql.NullFloat64
		)
		if err := rows.Scan(&i, &raw, &n, &age); err != nil {
			rows.Close()
			return fmt.Errorf("counting rows by status: %w", err)
		}
		if i < 0 || i >= len(chunk) {
			rows.Close()
			return fmt.Errorf("counting rows by status: a row for table %d of %d", i, len(chunk))
		}
		q := chunk[i]
		if label, ok := q.statuses[raw]; ok {
			counts[i][label] += float64(n)
		}
		if q.pending != "" && raw == q.pending && age.Valid {
			oldest[i] = age.Float64
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("counting rows by status: %w", err)
	}
	ratios, err := b.ratios(ctx, chunk)
	if err != nil {
		return err
	}
	now := float64(time.Now().UnixNano()) / 1e9
	for i, q := range chunk {
		g := b.Metrics.backlogGauges(q)
		for label, n := range counts[i] {
			g.rows(label, n)
		}
		if q.pending != "" {
			g.oldest(oldest[i])
		}
		if r, ok := ratios[i]; ok {
			g.ratio(r)
			q.lastRetries = time.Now()
		}
		g.queried(now)
	}
	return nil
}

// ratios reads the retry ratio of the tables of chunk that are due
// (RatioInterval), in one statement, by their index in chunk.
func (b *Backlog) ratios(ctx context.Context, chunk []*tableQueries) (map[int]float64, error) {
	var (
		parts []string
		args  []any
	)
	out := map[int]float64{}
	for i, q := range chunk {
		if len(q.ratioStatuses) == 0 || time.Since(q.lastRetries) < b.RatioInterval {
			continue
		}
		part, arg := outboxsql.RetryRatioTaggedSQL(q.t, q.ratioStatuses, i)
		parts, args = append(parts, part), append(args, arg...)
		out[i] = 0
	}
	if len(parts) == 0 {
		return out, nil
	}
	rows, err := b.DB.QueryContext(ctx, strings.Join(parts, " UNION ALL "), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the retry ratio: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int
		var all, retried int64
		if err := rows.Scan(&i, &all, &retried); err != nil {
			return nil, fmt.Errorf("reading the retry ratio: %w", err)
		}
		if _, ok := out[i]; ok && all > 0 {
			out[i] = float64(retried) / float64(all)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the retry ratio: %w", err)
	}
	return out, nil
}

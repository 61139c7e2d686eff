package metrics

import (
	"context"
	"database/sql"
	"fmt"
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
		for _, q := range queries {
			qctx, cancel := context.WithTimeout(ctx, max(interval, 10*time.Second))
			err := b.poll(qctx, q)
			cancel()
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				b.Metrics.outboxErrors.WithLabelValues(q.label).Inc()
				if !failing[q.table] {
					b.Log.Warn("outbox backlog query on the replica failed; backlog gauges are stale until it succeeds",
						zap.String("table", q.table), zap.Error(err))
				}
				failing[q.table] = true
			default:
				if failing[q.table] {
					b.Log.Info("outbox backlog query on the replica works again", zap.String("table", q.table))
				}
				failing[q.table] = false
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// tableQueries are the statements for one table; empty ones are skipped.
type tableQueries struct {
	table string
	// label is the table label its gauges go under: table, or its entry's
	// pattern when aggregate (metrics.max_table_series, tables.go).
	label     string
	aggregate bool

	statuses map[string]string // raw value as read back -> label
	counts   string
	oldest   string
	retries  string
	retryArg []any
	// lastRetries is when retries last ran (see RatioInterval).
	lastRetries time.Time
}

// BacklogQueries builds the statements for a table; ok is false when the
// table has no status column (nothing to count). Each uses the status
// index: counts and the oldest PENDING row are ranges on status, and the
// retry ratio is a range on (status, updated_at) for the statuses the relay
// knows.
func BacklogQueries(t *outbox.Table) (q tableQueries, ok bool) {
	s, c := t.Statuses, t.Columns
	if c.Status == "" {
		return q, false
	}
	q = tableQueries{table: t.FullName(), label: t.FullName(), statuses: map[string]string{}}
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
	q.counts = outboxsql.CountByStatusSQL(t, watched)
	if s.Pending != "" && c.CreatedAt != "" {
		q.oldest = outboxsql.OldestAgeSQL(t, []string{s.Pending})
	}
	if c.RetryCount != "" && c.UpdatedAt != "" {
		all := watched
		if s.Sent != "" {
			all = append(append([]string(nil), watched...), s.Sent)
		}
		q.retries, q.retryArg = outboxsql.RetryRatioSQL(t, all)
	}
	return q, true
}

func (b *Backlog) poll(ctx context.Context, q *tableQueries) error {
	counts := map[string]float64{}
	for _, label := range q.statuses {
		counts[label] = 0
	}
	rows, err := b.DB.QueryContext(ctx, q.counts)
	if err != nil {
		return fmt.Errorf("counting rows by status: %w", err)
	}
	for rows.Next() {
		var raw string
		var n int64
		if err := rows.Scan(&raw, &n); err != nil {
			rows.Close()
			return fmt.Errorf("counting rows by status: %w", err)
		}
		if label, ok := q.statuses[raw]; ok {
			counts[label] += float64(n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("counting rows by status: %w", err)
	}
	g := b.Metrics.backlogGauges(q)
	for label, n := range counts {
		g.rows(label, n)
	}

	if q.oldest != "" {
		var age sql.NullFloat64 // NULL, none pending: 0
		if err := b.DB.QueryRowContext(ctx, q.oldest).Scan(&age); err != nil {
			return fmt.Errorf("reading the oldest PENDING row: %w", err)
		}
		g.oldest(age.Float64)
	}

	if q.retries != "" && time.Since(q.lastRetries) >= b.RatioInterval {
		var all, retried int64
		if err := b.DB.QueryRowContext(ctx, q.retries, q.retryArg...).Scan(&all, &retried); err != nil {
			return fmt.Errorf("reading the retry ratio: %w", err)
		}
		ratio := 0.0
		if all > 0 {
			ratio = float64(retried) / float64(all)
		}
		g.ratio(ratio)
		q.lastRetries = time.Now()
	}
	g.queried(float64(time.Now().UnixNano()) / 1e9)
	return nil
}

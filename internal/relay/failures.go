package relay

// The rows that did not reach their own exchange: failures sent to the
// retry path (grouped, so a backlog costs one statement per batch) and rows
// dead-lettered, with their warnings throttled.

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// failGroup is a run of failed rows of one table with the same attempt
// (reason, retry count and limit): one UPDATE records them all. A backlog of
// rows to a deleted exchange then costs the primary one statement per batch,
// not one per row.
type failGroup struct {
	t        *outbox.Table
	attempt  rowstatus.Attempt // ID unused
	exchange string
	kind     string
	rows     rowstatus.Marks // ids and message ids, matched as the SENT marks are
	first    string          // message id of the first row, for the log
	// moved is set when a rename took the rows away from the configured
	// table (t is then their new location, rename.go).
	moved *moved
}

// fail sends a row to the retry path: PENDING with a later next_retry_time
// and the reason, or FAILED when its retries are used up. The write goes
// with the next batch, before the checkpoint that passes the row; the
// stream goes on behind it.
func (c *committer) fail(ctx context.Context, row *outbox.Row, exchange string, cause error) error {
	c.r.Stats.Failed.Add(1)
	c.r.cfg.Observer.Failed(row.Table, exchange, cause)
	t := row.Table
	a := rowstatus.Attempt{
		Retries:      intValue(row.Values[t.Columns.RetryCount]),
		MaxRetries:   t.MaxRetries,
		Reason:       cause.Error(),
		FromStatuses: t.Statuses.Publishable,
		Permanent:    errors.Is(cause, router.ErrNullField),
	}
	if t.Columns.MaxRetryCount != "" {
		a.MaxRetries = intValue(row.Values[t.Columns.MaxRetryCount])
	}
	if n := len(c.fails); n > 0 {
		if g := c.fails[n-1]; g.t == t && g.exchange == exchange && g.attempt.Reason == a.Reason &&
			g.attempt.Retries == a.Retries && g.attempt.MaxRetries == a.MaxRetries && g.attempt.Permanent == a.Permanent {
			g.rows.Add(ownValue(row.ID), ownValue(row.Values[t.Columns.MessageID]))
			return c.counted(ctx)
		}
	}
	// Copies, as the marks' (committer.row): the group is kept for minutes
	// (recordFailures), and go-mysql's strings share the binlog event's
	// buffer, which a failing row of 16 MiB would keep.
	g := &failGroup{t: t, attempt: a, exchange: exchange, kind: failureKind(cause), first: strings.Clone(router.MessageID(row))}
	g.rows.Add(ownValue(row.ID), ownValue(row.Values[t.Columns.MessageID]))
	c.fails = append(c.fails, g)
	return c.counted(ctx)
}

// recordFailures writes one group of failures (retried until the primary
// takes it: the checkpoint must not pass unrecorded rows) and logs it,
// throttled. The failures of rows a rename moved go where the rows live
// now and, in a cut-over, to their copies under the configured name
// (recordMoved, rename.go).
func (w *recorder) recordFailures(ctx context.Context, g *failGroup) error {
	var (
		outcome  rowstatus.Outcome
		recorded int64
		err      error
	)
	if g.moved != nil {
		outcome, recorded, err = w.recordMoved(ctx, g)
		g.moved.fails = append(g.moved.fails, g)
	} else {
		outcome, recorded, err = w.recordAt(ctx, g.t, g)
		// Kept with the recent marks: a rename read later writes it
		// again where the rows went (rename.go).
		w.recent.list(g.t).addFailure(g, time.Now())
	}
	if err != nil {
		return err
	}
	n := len(g.rows.IDs)
	if int(recorded) < n {
		// The rest left their publishable status meanwhile (the sweeper
		// sent them, or someone changed them: the newer status stands), or
		// the table under this name holds other rows now (renamed: the
		// record is written again where the rows went when the stream
		// reaches the rename).
		w.r.log.Warn("some failed rows were not recorded: no row in a publishable status matched them; if the table was renamed, "+
			"they are recorded where the rows went when the stream reaches the rename",
			zap.String("table", g.t.FullName()), zap.Int("rows", n), zap.Int64("recorded", recorded), zap.String("message_id", g.first))
	}
	k := throttleKey{table: g.t.FullName(), exchange: g.exchange, kind: g.kind}
	if ok, suppressed := w.r.warn.allow(k); ok {
		w.r.log.Warn("publish failed", zap.String("table", k.table), zap.String("message_id", g.first),
			zap.Any("id", g.rows.IDs[0]), zap.Int("rows", n), zap.String("exchange", g.exchange),
			zap.String("reason", g.attempt.Reason), zap.String("outcome", outcomeName(outcome)), zap.Int("suppressed", suppressed))
	}
	return nil
}

// recordAt writes a group of failures to table t, retried until the
// primary takes it; a table that does not exist has no row to record
// (renamed with nothing in its place yet, or dropped).
func (w *recorder) recordAt(ctx context.Context, t *outbox.Table, g *failGroup) (outcome rowstatus.Outcome, recorded int64, err error) {
	err = retry(ctx, w.r.log, "recording failed publishes", func() error {
		var err error
		outcome, recorded, err = w.r.marker.MarkRetryMany(ctx, t, g.attempt, g.rows)
		if rowstatus.TableMissing(err) {
			w.r.log.Warn("failed publishes not recorded: the table does not exist", zap.String("table", t.FullName()),
				zap.Int("rows", len(g.rows.IDs)), zap.String("message_id", g.first))
			outcome, recorded, err = rowstatus.Skipped, 0, nil
		}
		return err
	})
	return outcome, recorded, err
}

func outcomeName(o rowstatus.Outcome) string {
	switch o {
	case rowstatus.Retrying:
		return "retry scheduled"
	case rowstatus.Failed:
		return "FAILED"
	default:
		// The row left its publishable status meanwhile (the sweeper sent
		// it, or someone changed it): the newer status stands.
		return "not recorded (the row is no longer in a publishable status)"
	}
}

// failureKind names the kind of a publish failure, for throttling identical
// warnings (the error text differs per row: message id, lengths).
func failureKind(err error) string {
	for _, k := range []struct {
		err  error
		kind string
	}{
		{publisher.ErrReturned, "returned"}, {publisher.ErrNacked, "nacked"}, {publisher.ErrTooLarge, "too_large"},
		{publisher.ErrNoExchange, "no_exchange"}, {publisher.ErrRefused, "refused"},
		{publisher.ErrFieldTooLong, "field_too_long"}, {router.ErrNoRoute, "route"},
	} {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "other"
}

func intValue(v any) int {
	n, ok := colval.ValueUint64(v)
	if !ok {
		return 0
	}
	return int(n)
}

// deadLettered accounts for a row that went to the dead-letter exchange: it
// is settled (a table without a status column has nothing to mark).
func (c *committer) deadLettered(row *outbox.Row, exchange, reason string) {
	c.r.Stats.DeadLettered.Add(1)
	c.r.cfg.Observer.DeadLettered(row.Table, exchange, reason)
	k := throttleKey{table: row.Table.FullName(), exchange: exchange, kind: "dead_lettered"}
	if ok, suppressed := c.r.warn.allow(k); ok {
		c.r.log.Warn("message sent to the dead-letter exchange", zap.String("table", k.table),
			zap.String("message_id", router.MessageID(row)), zap.Any("id", row.ID), zap.String("exchange", exchange),
			zap.String("dead_letter_exchange", c.r.cfg.DeadLetterExchange), zap.String("reason", reason),
			zap.Int("suppressed", suppressed))
	}
}

// logSuppressed reports the lines the throttle held back once their
// interval is over.
func (c *committer) logSuppressed(k throttleKey, n int) {
	msg := "publish failed"
	if k.kind == "dead_lettered" {
		msg = "message sent to the dead-letter exchange"
	}
	c.r.log.Warn(msg+" (repeated; lines held back)", zap.String("table", k.table), zap.String("exchange", k.exchange),
		zap.String("kind", k.kind), zap.Int("suppressed", n), zap.Duration("interval", c.r.cfg.WarnEvery))
}

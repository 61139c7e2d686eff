package relay

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/binlog"
	"github.com/binlog-relay/binlog-relay/internal/checkpoint"
	"github.com/binlog-relay/binlog-relay/internal/outbox"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/router"
	"github.com/binlog-relay/binlog-relay/internal/status"
)

// settler is the last stage: it batches SENT marks, records failures and
// hands batches to the marker, which runs the SENT updates and saves the
// checkpoint. Results arrive in binlog order and batches are written in
// order, so once a batch is written every commit before its position has
// all its rows confirmed and marked: that position is safe to save. The
// updates run beside the settling (not inside it) so the primary's round
// trip never stalls the confirms behind it.
type settler struct {
	r    *Relay
	stop context.Context // the graceful stop
	// discard is set once the stream held behind a row it could not record
	// and the stop came: later results only give their budget back.
	discard  bool
	tracker  *binlog.Tracker
	pending  map[*outbox.Table][]any
	fails    []*failGroup // failures to record, in the order they came
	count    int          // marks and failures waiting for the next batch
	advanced bool         // commits applied since the last batch
	// xaOpen: the last commit left a prepared XA branch open in the
	// reader's memory; no position past its prepare is handed on. safe is
	// the position before that prepare, if not handed on yet.
	xaOpen  bool
	safe    *binlog.Position
	handed  bool // a position was handed to the marker (the start one may never have been saved)
	batches chan<- batch
}

// batch is one hand-over from the settler to the marker.
type batch struct {
	marks map[*outbox.Table][]any
	// fails are the failed rows to record, grouped by identical attempt.
	fails []*failGroup
	// pos is the position after the last commit settled before the batch,
	// nil when no commit came since the previous batch.
	pos *binlog.Position
	// save asks for a checkpoint save after the marks; final is the drain's
	// last batch.
	save, final bool
}

func (r *Relay) settle(ctx, stop context.Context, start binlog.Position, results <-chan publisher.Result) error {
	tracker, err := binlog.NewTracker(start)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	batches := make(chan batch, 2)
	m := &marker{r: r}
	g.Go(func() error { return m.run(gctx, batches) })
	s := &settler{r: r, stop: stop, tracker: tracker, pending: map[*outbox.Table][]any{}, batches: batches}
	g.Go(func() error {
		defer close(batches)
		return s.run(gctx, results)
	})
	return g.Wait()
}

func (s *settler) run(ctx context.Context, results <-chan publisher.Result) error {
	flushTick := time.NewTicker(s.r.cfg.FlushInterval)
	defer flushTick.Stop()
	saveTick := time.NewTicker(s.r.cfg.CheckpointInterval)
	defer saveTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case res, ok := <-results:
			if !ok {
				// Drained: mark the rest and save where we stand.
				return s.flush(ctx, true, true)
			}
			if err := s.handle(ctx, res); err != nil {
				return err
			}
		case <-flushTick.C:
			s.r.warn.flush(s.logSuppressed)
			if err := s.flush(ctx, false, false); err != nil {
				return err
			}
		case <-saveTick.C:
			if err := s.flush(ctx, true, false); err != nil {
				return err
			}
		}
	}
}

func (s *settler) handle(ctx context.Context, res publisher.Result) error {
	switch tag := res.Job.Tag.(type) {
	case binlog.Commit:
		if s.discard {
			return nil
		}
		if tag.OpenXA && !s.xaOpen && (s.advanced || !s.handed) {
			pos := s.tracker.Position()
			s.safe = &pos
		}
		if err := s.tracker.Apply(tag); err != nil {
			return err
		}
		s.xaOpen = tag.OpenXA
		s.advanced = !s.xaOpen
		if !s.xaOpen {
			s.safe = nil
		}
	case rowFailure:
		defer s.r.budget.release(tag.weight)
		if s.discard {
			return nil
		}
		return s.fail(ctx, tag.row, "", tag.err)
	case *inflightRow:
		defer s.r.budget.release(tag.weight)
		if s.discard {
			return nil
		}
		return s.row(ctx, tag, res)
	}
	return nil
}

// row settles one published row: SENT (batched), dead-lettered, or failed.
func (s *settler) row(ctx context.Context, tag *inflightRow, res publisher.Result) error {
	row, exchange := tag.row, res.Job.Msg.Exchange
	statusless := row.Table.Columns.Status == ""
	switch {
	case res.Err != nil && statusless:
		return s.holdUnrecorded(ctx, row, exchange, res.Err)
	case res.Err != nil:
		return s.fail(ctx, row, exchange, res.Err)
	case tag.unroutable != nil:
		// The relay addressed it to the dead-letter exchange itself.
		s.deadLettered(row, "", tag.unroutable.Error())
		return nil
	case res.DeadLettered:
		s.deadLettered(row, exchange, res.Reason)
		return nil
	}
	s.r.Stats.Published.Add(1)
	var sinceCommit time.Duration
	if row.EventTime > 0 {
		sinceCommit = time.Since(time.Unix(int64(row.EventTime), 0))
	}
	s.r.cfg.Observer.Published(row.Table, exchange, res.Latency, sinceCommit)
	if statusless {
		return nil
	}
	s.pending[row.Table] = append(s.pending[row.Table], row.ID)
	return s.counted(ctx)
}

// deadLettered accounts for a row that went to the dead-letter exchange: it
// is settled (a table without a status column has nothing to mark).
func (s *settler) deadLettered(row *outbox.Row, exchange, reason string) {
	s.r.Stats.DeadLettered.Add(1)
	s.r.cfg.Observer.DeadLettered(row.Table, exchange, reason)
	k := throttleKey{table: row.Table.FullName(), exchange: exchange, kind: "dead_lettered"}
	if ok, suppressed := s.r.warn.allow(k); ok {
		s.r.log.Warn("message sent to the dead-letter exchange", zap.String("table", k.table),
			zap.String("message_id", router.MessageID(row)), zap.Any("id", row.ID), zap.String("exchange", exchange),
			zap.String("dead_letter_exchange", s.r.cfg.DeadLetterExchange), zap.String("reason", reason),
			zap.Int("suppressed", suppressed))
	}
}

// logSuppressed reports the lines the throttle held back once their
// interval is over.
func (s *settler) logSuppressed(k throttleKey, n int) {
	msg := "publish failed"
	if k.kind == "dead_lettered" {
		msg = "message sent to the dead-letter exchange"
	}
	s.r.log.Warn(msg+" (repeated; lines held back)", zap.String("table", k.table), zap.String("exchange", k.exchange),
		zap.String("kind", k.kind), zap.Int("suppressed", n), zap.Duration("interval", s.r.cfg.WarnEvery))
}

// flush hands the confirmed rows, and the position reached, to the marker.
// The channel between them is small: a slow primary holds the pipeline.
func (s *settler) flush(ctx context.Context, save, final bool) error {
	// A save request always goes through: the marker may hold a position
	// that an earlier batch brought and no save has stored yet.
	if s.count == 0 && !s.advanced && s.safe == nil && !save {
		return nil
	}
	b := batch{save: save, final: final}
	if s.count > 0 {
		b.marks, s.pending, s.count = s.pending, map[*outbox.Table][]any{}, 0
		b.fails, s.fails = s.fails, nil
	}
	switch {
	case s.advanced:
		pos := s.tracker.Position()
		b.pos, s.advanced = &pos, false
	case s.safe != nil:
		b.pos, s.safe = s.safe, nil
	}
	s.handed = s.handed || b.pos != nil
	select {
	case s.batches <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// marker writes batches in order: the SENT updates (one statement per
// table, retried until the primary takes it: the checkpoint must not pass
// unmarked rows), then the checkpoint when one is due.
type marker struct {
	r *Relay
	// latest is the position after the last written batch; dirty means it
	// was not saved yet.
	latest binlog.Position
	dirty  bool
	// storeDown is when saving the checkpoint started failing (zero while
	// it works): publishing goes on for StoreOutageWindow after it.
	storeDown time.Time
}

func (m *marker) run(ctx context.Context, batches <-chan batch) error {
	for b := range batches {
		for t, ids := range b.marks {
			err := retry(ctx, m.r.log, "marking rows sent", func() error {
				n, err := m.r.status.MarkSent(ctx, t, ids)
				if err == nil {
					m.r.Stats.Marked.Add(n)
					m.r.cfg.Observer.Marked(t, n)
					if dup := int64(len(ids)) - n; dup > 0 {
						// Only publishable rows move: the others were
						// SENT already, so this publish was a duplicate.
						m.r.Stats.AlreadySent.Add(dup)
						m.r.cfg.Observer.AlreadySent(t, dup)
					}
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		for _, g := range b.fails {
			if err := m.recordFailures(ctx, g); err != nil {
				return err
			}
		}
		if b.pos != nil {
			m.latest, m.dirty = *b.pos, true
		}
		if b.save || b.final {
			if err := m.save(ctx, b.final); err != nil {
				return err
			}
		}
	}
	return nil
}

// failGroup is a run of failed rows of one table with the same attempt
// (reason, retry count and limit): one UPDATE records them all. A backlog of
// rows to a deleted exchange then costs the primary one statement per batch,
// not one per row.
type failGroup struct {
	t        *outbox.Table
	attempt  status.Attempt // ID unused
	exchange string
	kind     string
	ids      []any
	first    string // message id of the first row, for the log
}

// fail sends a row to the retry path: PENDING with a later next_retry_time
// and the reason, or FAILED when its retries are used up. The write goes
// with the next batch, before the checkpoint that passes the row; the
// stream goes on behind it.
func (s *settler) fail(ctx context.Context, row *outbox.Row, exchange string, cause error) error {
	s.r.Stats.Failed.Add(1)
	s.r.cfg.Observer.Failed(row.Table, exchange, cause)
	t := row.Table
	a := status.Attempt{
		Retries:      intValue(row.Values[t.Columns.RetryCount]),
		MaxRetries:   t.MaxRetries,
		Reason:       cause.Error(),
		FromStatuses: t.Statuses.Publishable,
		Permanent:    errors.Is(cause, router.ErrNullField),
	}
	if t.Columns.MaxRetryCount != "" {
		a.MaxRetries = intValue(row.Values[t.Columns.MaxRetryCount])
	}
	if n := len(s.fails); n > 0 {
		if g := s.fails[n-1]; g.t == t && g.exchange == exchange && g.attempt.Reason == a.Reason &&
			g.attempt.Retries == a.Retries && g.attempt.MaxRetries == a.MaxRetries && g.attempt.Permanent == a.Permanent {
			g.ids = append(g.ids, row.ID)
			return s.counted(ctx)
		}
	}
	s.fails = append(s.fails, &failGroup{t: t, attempt: a, exchange: exchange, kind: failureKind(cause),
		ids: []any{row.ID}, first: router.MessageID(row)})
	return s.counted(ctx)
}

// counted notes one more row waiting for the next batch and hands the batch
// over when it is full.
func (s *settler) counted(ctx context.Context) error {
	s.count++
	if s.count >= s.r.cfg.BatchSize {
		return s.flush(ctx, false, false)
	}
	return nil
}

// recordFailures writes one group of failures (retried until the primary
// takes it: the checkpoint must not pass unrecorded rows) and logs it,
// throttled.
func (m *marker) recordFailures(ctx context.Context, g *failGroup) error {
	var (
		outcome  status.Outcome
		recorded int64
	)
	err := retry(ctx, m.r.log, "recording failed publishes", func() error {
		var err error
		outcome, recorded, err = m.r.status.MarkRetryMany(ctx, g.t, g.attempt, g.ids)
		return err
	})
	if err != nil {
		return err
	}
	if int(recorded) < len(g.ids) {
		// The rest left their publishable status meanwhile (the sweeper
		// sent them, or someone changed them): the newer status stands.
		m.r.log.Info("some failed rows were not recorded: they are no longer in a publishable status",
			zap.String("table", g.t.FullName()), zap.Int("rows", len(g.ids)), zap.Int64("recorded", recorded))
	}
	k := throttleKey{table: g.t.FullName(), exchange: g.exchange, kind: g.kind}
	if ok, suppressed := m.r.warn.allow(k); ok {
		m.r.log.Warn("publish failed", zap.String("table", k.table), zap.String("message_id", g.first),
			zap.Any("id", g.ids[0]), zap.Int("rows", len(g.ids)), zap.String("exchange", g.exchange),
			zap.String("reason", g.attempt.Reason), zap.String("outcome", outcomeName(outcome)), zap.Int("suppressed", suppressed))
	}
	return nil
}

// save stores the position. While the store is unreachable the pipeline
// keeps publishing for StoreOutageWindow with the position held here (a
// crash then replays from the last save, so the window bounds the replay),
// then holds until the store answers. The final save of a drain holds at
// once. A fenced write (the lease is lost) stops the pipeline.
func (m *marker) save(ctx context.Context, final bool) error {
	if !m.dirty {
		return nil
	}
	cp := checkpoint.FromPosition(m.latest, m.r.cfg.Server, time.Now())
	err := m.r.store.Save(ctx, cp)
	if err != nil && !errors.Is(err, checkpoint.ErrFenced) && ctx.Err() == nil {
		if m.storeDown.IsZero() {
			m.storeDown = time.Now()
			m.r.log.Warn("saving the checkpoint failed; publishing on with the position held in memory",
				zap.Duration("outage_window", m.r.cfg.StoreOutageWindow), zap.String("gtid", cp.GTIDSet), zap.Error(err))
		}
		if !final && time.Since(m.storeDown) < m.r.cfg.StoreOutageWindow {
			return nil
		}
		m.r.log.Error("the checkpoint could not be saved for longer than the outage window: publishing holds until it can",
			zap.Duration("outage_window", m.r.cfg.StoreOutageWindow), zap.Duration("down_for", time.Since(m.storeDown).Round(time.Second)))
		err = retry(ctx, m.r.log, "saving the checkpoint", func() error { return m.r.store.Save(ctx, cp) })
	}
	if err != nil {
		return err
	}
	if !m.storeDown.IsZero() {
		m.r.log.Info("checkpoint saved again after an outage", zap.Duration("down_for", time.Since(m.storeDown).Round(time.Second)),
			zap.String("gtid", cp.GTIDSet))
		m.storeDown = time.Time{}
	}
	m.dirty = false
	m.r.lastSaved.Store(&cp)
	m.r.Stats.Checkpoints.Add(1)
	m.r.cfg.Observer.Checkpointed(cp)
	m.r.log.Debug("checkpoint saved", zap.String("gtid", cp.GTIDSet), zap.String("binlog_file", cp.File), zap.Uint32("binlog_pos", cp.Pos))
	return nil
}

func outcomeName(o status.Outcome) string {
	switch o {
	case status.Retrying:
		return "retry scheduled"
	case status.Failed:
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
	n, ok := outbox.ValueUint64(v)
	if !ok {
		return 0
	}
	return int(n)
}

// retry runs op until it succeeds or ctx ends, with capped backoff. A
// primary or Redis outage holds the pipeline (and so the checkpoint) rather
// than losing track of rows.
func retry(ctx context.Context, log *zap.Logger, what string, op func() error) error {
	wait := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := op()
		if err == nil {
			return nil
		}
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, checkpoint.ErrFenced) {
			return err // the lease is lost: retrying cannot help
		}
		pause := wait.Next()
		log.Warn(what+" failed, retrying", zap.Error(err), zap.Duration("backoff", pause))
		if err := backoff.Sleep(ctx, pause); err != nil {
			return err
		}
	}
}

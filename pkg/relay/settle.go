package relay

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/publisher"
	"github.com/binlog-relay/binlog-relay/pkg/router"
	"github.com/binlog-relay/binlog-relay/pkg/status"
)

// settler is the last stage: it batches SENT marks, records failures and
// saves the checkpoint. Results arrive in binlog order, so after a flush
// every commit seen so far is safe to save.
type settler struct {
	r        *Relay
	tracker  *binlog.Tracker
	pending  map[*outbox.Table][]any
	count    int
	advanced bool // commits applied since the last save
	// storeDown is when saving the checkpoint started failing (zero while
	// it works): publishing goes on for StoreOutageWindow after it.
	storeDown time.Time
}

func (r *Relay) settle(ctx context.Context, start binlog.Position, results <-chan publisher.Result) error {
	tracker, err := binlog.NewTracker(start)
	if err != nil {
		return err
	}
	s := &settler{r: r, tracker: tracker, pending: map[*outbox.Table][]any{}}
	flushTick := time.NewTicker(r.cfg.FlushInterval)
	defer flushTick.Stop()
	saveTick := time.NewTicker(r.cfg.CheckpointInterval)
	defer saveTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case res, ok := <-results:
			if !ok {
				// Drained: mark the rest and save where we stand.
				if err := s.flush(ctx); err != nil {
					return err
				}
				return s.save(ctx, true)
			}
			if err := s.handle(ctx, res); err != nil {
				return err
			}
		case <-flushTick.C:
			if err := s.flush(ctx); err != nil {
				return err
			}
		case <-saveTick.C:
			if err := s.flush(ctx); err != nil {
				return err
			}
			if err := s.save(ctx, false); err != nil {
				return err
			}
		}
	}
}

func (s *settler) handle(ctx context.Context, res publisher.Result) error {
	switch tag := res.Job.Tag.(type) {
	case binlog.Commit:
		if err := s.tracker.Apply(tag); err != nil {
			return err
		}
		s.advanced = true
	case rowFailure:
		return s.fail(ctx, tag.row, "", tag.err)
	case *outbox.Row:
		exchange := res.Job.Msg.Exchange
		if res.Err != nil {
			return s.fail(ctx, tag, exchange, res.Err)
		}
		s.r.Stats.Published.Add(1)
		var sinceCommit time.Duration
		if tag.EventTime > 0 {
			sinceCommit = time.Since(time.Unix(int64(tag.EventTime), 0))
		}
		s.r.cfg.Observer.Published(tag.Table, exchange, res.Latency, sinceCommit)
		if tag.Table.Columns.Status == "" {
			return nil
		}
		s.pending[tag.Table] = append(s.pending[tag.Table], tag.ID)
		s.count++
		if s.count >= s.r.cfg.BatchSize {
			return s.flush(ctx)
		}
	}
	return nil
}

// flush marks every confirmed row SENT, one statement per table, retrying
// until the primary takes it: the checkpoint must not pass unmarked rows.
func (s *settler) flush(ctx context.Context) error {
	for t, ids := range s.pending {
		if len(ids) == 0 {
			continue
		}
		err := retry(ctx, s.r.log, "marking rows sent", func() error {
			n, err := s.r.status.MarkSent(ctx, t, ids)
			if err == nil {
				s.r.Stats.Marked.Add(n)
				s.r.cfg.Observer.Marked(t, n)
			}
			return err
		})
		if err != nil {
			return err
		}
		s.pending[t] = ids[:0]
	}
	s.count = 0
	return nil
}

// fail sends a row to the retry path: PENDING with a later next_retry_time
// and the reason, or FAILED when its retries are used up. The stream goes
// on behind it.
func (s *settler) fail(ctx context.Context, row *outbox.Row, exchange string, cause error) error {
	s.r.Stats.Failed.Add(1)
	s.r.cfg.Observer.Failed(row.Table, exchange, cause)
	t := row.Table
	a := status.Attempt{
		ID:           row.ID,
		Retries:      intValue(row.Values[t.Columns.RetryCount]),
		MaxRetries:   t.MaxRetries,
		Reason:       cause.Error(),
		FromStatuses: t.Statuses.Publishable,
	}
	if t.Columns.MaxRetryCount != "" {
		a.MaxRetries = intValue(row.Values[t.Columns.MaxRetryCount])
	}
	var outcome status.Outcome
	err := retry(ctx, s.r.log, "recording a failed publish", func() error {
		var err error
		outcome, err = s.r.status.MarkRetry(ctx, t, a)
		return err
	})
	if err != nil {
		return err
	}
	s.r.log.Warn("publish failed", zap.String("table", t.FullName()), zap.String("message_id", router.MessageID(row)),
		zap.Any("id", row.ID), zap.String("reason", cause.Error()), zap.String("outcome", outcomeName(outcome)))
	return nil
}

// save stores the position. While the store is unreachable the pipeline
// keeps publishing for StoreOutageWindow with the position held here (a
// crash then replays from the last save, so the window bounds the replay),
// then holds until the store answers. The final save of a drain holds at
// once. A fenced write (the lease is lost) stops the pipeline.
func (s *settler) save(ctx context.Context, final bool) error {
	if !s.advanced {
		return nil
	}
	cp := checkpoint.FromPosition(s.tracker.Position(), s.r.cfg.Server, time.Now())
	err := s.r.store.Save(ctx, cp)
	if err != nil && !errors.Is(err, checkpoint.ErrFenced) && ctx.Err() == nil {
		if s.storeDown.IsZero() {
			s.storeDown = time.Now()
			s.r.log.Warn("saving the checkpoint failed; publishing on with the position held in memory",
				zap.Duration("outage_window", s.r.cfg.StoreOutageWindow), zap.String("gtid", cp.GTIDSet), zap.Error(err))
		}
		if !final && time.Since(s.storeDown) < s.r.cfg.StoreOutageWindow {
			return nil
		}
		s.r.log.Error("the checkpoint could not be saved for longer than the outage window: publishing holds until it can",
			zap.Duration("outage_window", s.r.cfg.StoreOutageWindow), zap.Duration("down_for", time.Since(s.storeDown).Round(time.Second)))
		err = retry(ctx, s.r.log, "saving the checkpoint", func() error { return s.r.store.Save(ctx, cp) })
	}
	if err != nil {
		return err
	}
	if !s.storeDown.IsZero() {
		s.r.log.Info("checkpoint saved again after an outage", zap.Duration("down_for", time.Since(s.storeDown).Round(time.Second)),
			zap.String("gtid", cp.GTIDSet))
		s.storeDown = time.Time{}
	}
	s.advanced = false
	s.r.lastSaved.Store(&cp)
	s.r.Stats.Checkpoints.Add(1)
	s.r.cfg.Observer.Checkpointed(cp)
	s.r.log.Debug("checkpoint saved", zap.String("gtid", cp.GTIDSet), zap.String("binlog_file", cp.File), zap.Uint32("binlog_pos", cp.Pos))
	return nil
}

func outcomeName(o status.Outcome) string {
	switch o {
	case status.Retrying:
		return "retry scheduled"
	case status.Failed:
		return "FAILED"
	default:
		return "not recorded (row not in a publishable status, or the table has no status column)"
	}
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
	backoff := 100 * time.Millisecond
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
		log.Warn(what+" failed, retrying", zap.Error(err), zap.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

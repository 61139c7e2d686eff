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
				return s.save(ctx)
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
			if err := s.save(ctx); err != nil {
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

func (s *settler) save(ctx context.Context) error {
	if !s.advanced {
		return nil
	}
	cp := checkpoint.FromPosition(s.tracker.Position(), s.r.cfg.Server, time.Now())
	err := retry(ctx, s.r.log, "saving the checkpoint", func() error { return s.r.store.Save(ctx, cp) })
	if err != nil {
		return err
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
		log.Warn(what+" failed, retrying", zap.Error(err), zap.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

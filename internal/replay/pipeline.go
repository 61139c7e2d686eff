package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// maxFailedIDs bounds the failed ids a summary lists.
const maxFailedIDs = 20

// pipeBuffer is the room between the stages, in messages.
const pipeBuffer = 256

// pipeline is three goroutines in one errgroup: the feeder reads chunks
// and hands jobs to the publisher at the rate, the publisher publishes them
// in order with confirms, the collector settles each result in order and
// moves the cursor. An interrupt (ctx) stops only the feeder: it ends the
// stream with an End marker, and the publisher and the collector run on
// until every message in flight is settled (or DrainTimeout passes), so the
// saved cursor covers all that was sent and a resumed run sends nothing
// twice.
func (r *Replayer) pipeline(ctx context.Context) (failedIDs []string, err error) {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopDrain := context.AfterFunc(ctx, func() {
		t := time.NewTimer(r.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			r.log.Warn("confirms still outstanding after the interrupt: giving up on them (they may be sent again by --resume)",
				zap.Duration("drain_timeout", r.cfg.DrainTimeout))
			cancelWork()
		case <-work.Done():
		}
	})
	defer stopDrain()
	g, gctx := errgroup.WithContext(work)
	// Small buffers: the publisher's confirm window is the queue that
	// matters, and a chunk already read is the only other batch of rows
	// held in memory.
	jobs := make(chan publisher.Job[Tag], pipeBuffer)
	results := make(chan publisher.Result[Tag], pipeBuffer)
	g.Go(func() error {
		if err := r.pub.Run(gctx, jobs, results); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("publishing: %w", err)
		}
		return nil
	})
	start := r.st.Cursor // the collector moves it once results come
	g.Go(func() error {
		defer close(jobs)
		return r.feed(ctx, gctx, jobs, start)
	})
	g.Go(func() error {
		var err error
		failedIDs, err = r.collect(gctx, results)
		cancelWork() // every result is in: the publisher may stop
		return err
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil // the collector saw the end, or the interrupt's drain gave up
	}
	return failedIDs, err
}

// feed reads chunks past the cursor and sends one job per row, at the rate,
// until the range is done or ctx (the interrupt) ends; then the End marker.
func (r *Replayer) feed(ctx, work context.Context, jobs chan<- publisher.Job[Tag], after string) error {
	pace := newPacer(r.cfg.Rate)
	send := func(j publisher.Job[Tag], c context.Context) bool {
		select {
		case jobs <- j:
			return true
		case <-c.Done():
			return false
		}
	}
	end := func() error {
		if !send(publisher.Job[Tag]{Tag: Tag{End: true}}, work) {
			return work.Err()
		}
		return nil
	}
	for ctx.Err() == nil {
		rows, err := r.chunk(ctx, after, r.cfg.ChunkSize)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		for _, row := range rows {
			if pace.wait(ctx) != nil {
				return end()
			}
			id := colval.ValueString(row.ID)
			j := publisher.Job[Tag]{Tag: Tag{ID: id, MsgID: router.MessageID(row)}}
			if msg, err := r.route(row); err != nil {
				j.Tag.RouteErr = err // a marker keeps its place, so the cursor stays in order
			} else {
				j.Msg = msg
			}
			if !send(j, ctx) {
				return end()
			}
			after = id
		}
		if len(rows) < r.cfg.ChunkSize {
			break
		}
	}
	return end()
}

// collect settles results in order until the End marker, saving the
// progress about once a second.
func (r *Replayer) collect(ctx context.Context, results <-chan publisher.Result[Tag]) ([]string, error) {
	table := r.cfg.Table.FullName()
	var failedIDs []string
	lastSave := time.Now()
	for {
		var res publisher.Result[Tag]
		select {
		case res = <-results:
		case <-ctx.Done():
			return failedIDs, ctx.Err()
		}
		tag := res.Job.Tag
		if tag.End {
			return failedIDs, nil
		}
		err := cmpErr(tag.RouteErr, res.Err)
		if err != nil {
			r.failed.Add(1)
			if len(failedIDs) < maxFailedIDs {
				failedIDs = append(failedIDs, tag.ID)
			}
			exchange := ""
			if res.Job.Msg != nil {
				exchange = res.Job.Msg.Exchange
			}
			r.log.Warn("replay publish failed", zap.String("table", table), zap.String("id", tag.ID),
				zap.String("message_id", tag.MsgID), zap.String("exchange", exchange), zap.String("reason", err.Error()))
			if r.obs != nil {
				r.obs.ReplayRows(table, "failed", 1)
			}
		} else {
			r.published.Add(1)
			if r.obs != nil {
				r.obs.ReplayRows(table, "published", 1)
			}
		}
		r.st.Cursor = tag.ID
		r.settled.Add(1)
		if r.obs != nil {
			r.obs.ReplayCursor(table, r.published.Load()+r.failed.Load())
		}
		if time.Since(lastSave) >= time.Second {
			if err := r.save(ctx); err != nil {
				return failedIDs, err
			}
			lastSave = time.Now()
		}
	}
}

func cmpErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

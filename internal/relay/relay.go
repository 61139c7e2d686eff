// Package relay wires the binlog path: reader -> router -> publisher ->
// status writer -> checkpoint. Each stage is a goroutine joined by a bounded
// channel; results come back from the publisher in binlog order, which is
// what lets the checkpoint name only whole transactions below which every
// row was confirmed and marked. With several lanes (lanes.go) the rows are
// spread over publishers by partition key and their results merged back
// into binlog order, so the rule is the same.
package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Config tunes the pipeline.
type Config struct {
	// BatchSize is the most rows one SENT update names.
	BatchSize int
	// FlushInterval bounds how long a confirmed row waits for its SENT
	// update while the replica keeps up; it trades primary statements for
	// status freshness (delivery itself does not wait for it). While the
	// replica lags, batches grow towards BatchSize and the wait towards
	// five times this (rowstatus.Cadence).
	FlushInterval time.Duration
	// MaxUnmarked is the most rows confirmed by the broker and not yet
	// marked SENT: past it, confirmations wait for the marks. A crash
	// publishes those rows again, so it bounds the duplicates of a SIGKILL.
	MaxUnmarked int
	// MarkSessions is the most tables of one batch marked at once, each
	// statement on its own connection and committed on its own
	// (recorder.markAll); 0 means 4.
	MarkSessions int
	// CheckpointInterval is the longest a position waits for its save: a
	// batch that marks rows and moves the position saves it at once
	// (recorder.go). A crash replays what came after the last save.
	CheckpointInterval time.Duration
	// Buffer is the capacity of each channel between stages.
	Buffer int
	// DrainTimeout bounds the graceful stop: in-flight messages are
	// confirmed and marked and the checkpoint saved within it.
	DrainTimeout time.Duration
	// Server names the source in each checkpoint (asked at each save: a
	// failover changes it); nil names none.
	Server func() string
	// Observer receives per-row outcomes (metrics); nil means none.
	Observer Observer
	// Guard, when set, is asked before each row goes to the publisher, and
	// by each lane before it writes a message (a lane with SetGuard); an
	// error stops the pipeline at once, without draining (a leader whose
	// lease ran out must not publish another row, nor the ones already
	// queued in its lanes when it wakes from a pause).
	Guard func() error
	// StoreOutageWindow is how long publishing goes on while the checkpoint
	// cannot be saved, the position held in memory; past it the pipeline
	// holds until the store answers. Zero holds at once.
	StoreOutageWindow time.Duration
	// MaxInflightBytes bounds the bytes of the rows between the router and
	// the settle stage (see budget).
	MaxInflightBytes int64
	// DeadLetterExchange receives the rows of tables without a status column
	// that cannot be routed (the publisher dead-letters the ones the broker
	// refuses). Empty: such a row holds the stream until the relay is
	// stopped and its configuration fixed.
	DeadLetterExchange string
	// Sent, when set, tells which rows read at the start of a Run are SENT
	// already, so they are not published again (replaycheck.go); nil
	// publishes them all.
	Sent SentLookup
	// SeqScope names what the publishing ids count (the tables, lanes and
	// stream they go to), saved with them in the checkpoint: a checkpoint
	// saved under another scope does not resume its ids (seq.go). Empty:
	// no stream lane uses them, and checkpoints carry none.
	SeqScope string
	// WarnEvery spaces repeated identical warnings (same table, exchange and
	// kind of failure): one line per interval with a count of the others.
	WarnEvery time.Duration
}

// MaxMarkSessions bounds relay.mark_sessions: each is a connection to the
// primary.
const MaxMarkSessions = 32

// Defaults fills unset fields.
func (c *Config) Defaults() {
	c.BatchSize = cmp.Or(c.BatchSize, 1000)
	c.FlushInterval = cmp.Or(c.FlushInterval, 200*time.Millisecond)
	c.MaxUnmarked = cmp.Or(c.MaxUnmarked, 4096)
	c.MarkSessions = cmp.Or(c.MarkSessions, 4)
	c.CheckpointInterval = cmp.Or(c.CheckpointInterval, time.Second)
	c.Buffer = cmp.Or(c.Buffer, 1024)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 30*time.Second)
	c.Observer = cmp.Or[Observer](c.Observer, nopObserver{})
	c.MaxInflightBytes = cmp.Or(c.MaxInflightBytes, 64<<20)
	c.WarnEvery = cmp.Or(c.WarnEvery, 10*time.Second)
}

// Validate reports every bad field, by its YAML key; it expects Defaults
// to have filled the zero ones.
func (c *Config) Validate() error {
	var errs []error
	if c.BatchSize < 1 {
		errs = append(errs, errors.New("relay.batch_size: must be at least 1"))
	}
	if c.FlushInterval <= 0 {
		errs = append(errs, errors.New("relay.flush_interval: must be positive"))
	}
	if c.MaxUnmarked < 1 {
		errs = append(errs, errors.New("relay.max_unmarked: must be at least 1"))
	}
	if c.MarkSessions < 1 || c.MarkSessions > MaxMarkSessions {
		errs = append(errs, fmt.Errorf("relay.mark_sessions: must be 1 to %d", MaxMarkSessions))
	}
	if c.CheckpointInterval <= 0 {
		errs = append(errs, errors.New("checkpoint.interval: must be positive"))
	}
	if c.StoreOutageWindow < 0 {
		errs = append(errs, errors.New("checkpoint.outage_window: must be positive"))
	}
	if c.Buffer < 1 {
		errs = append(errs, errors.New("relay.buffer: must be at least 1"))
	}
	if c.MaxInflightBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("relay.max_inflight_bytes: %d is under 1 MiB (1048576)", c.MaxInflightBytes))
	}
	return errors.Join(errs...)
}

// cadence is the marks' batching (rowstatus.Cadence): from a quarter of
// BatchSize every FlushInterval while the replica keeps up, to BatchSize
// (at most half of MaxUnmarked) every five FlushIntervals while it lags.
func (c *Config) cadence() *rowstatus.Cadence {
	return rowstatus.NewCadence(rowstatus.Cadence{MaxBatch: c.BatchSize, MaxUnmarked: c.MaxUnmarked,
		Interval: c.FlushInterval, MaxInterval: 5 * c.FlushInterval})
}

// Stats are the pipeline's counters, safe to read while it runs.
type Stats struct {
	Published atomic.Int64 // confirmed and routed
	Failed    atomic.Int64 // sent to the retry path or FAILED
	Marked    atomic.Int64 // rows moved to SENT by this relay
	// AlreadySent counts rows published that were no longer pending when
	// marked: duplicates (replays after a crash, rows the sweeper sent).
	AlreadySent atomic.Int64
	Checkpoints atomic.Int64 // checkpoints saved
	// DeadLettered counts rows of tables without a status column that went
	// to the dead-letter exchange instead of their own.
	DeadLettered atomic.Int64
}

// guardedLane is a lane that asks the guard itself before each message it
// writes (publisher.Publisher, streamlane.Lane).
type guardedLane interface{ SetGuard(func() error) }

// Relay is one binlog path.
type Relay struct {
	cfg    Config
	reader Reader
	router *router.Router
	lanes  []Lane
	marker Marker
	store  CheckpointStore
	log    *zap.Logger
	Stats  Stats

	lastSaved atomic.Pointer[checkpoint.Checkpoint]
	// marked is the last commit up to which every row is marked or its
	// failure recorded (MarkedThrough).
	marked atomic.Pointer[binlog.Commit]
	// laneSet is the current Run's lanes when there are several.
	laneSet atomic.Pointer[laneSet]
	// The current Run's confirmed rows not yet marked (Unmarked): waiting
	// in the committer, and handed to the recorder and not yet written.
	waitingMarks   atomic.Int64
	unwrittenMarks atomic.Pointer[atomic.Int64]
	// budget is the byte budget of the current Run.
	budget *budget
	// hold is set while the relay itself holds the stream behind a row it
	// can neither publish nor record (hold.go).
	hold atomic.Pointer[publisher.Hold]
	warn *throttle

	// Publishing ids (seq.go).
	seqMu    sync.Mutex
	resume   *checkpoint.Checkpoint
	seqFloor uint64

	abortMu    sync.Mutex
	abortCause error
	abortRun   context.CancelCauseFunc
}

// Abort stops the pipeline at once, without draining: nothing more is
// published, marked or saved, and Run returns cause. A leader that lost its
// lease calls it. It may come before Run starts.
func (r *Relay) Abort(cause error) {
	r.abortMu.Lock()
	defer r.abortMu.Unlock()
	r.abortCause = cause
	if r.abortRun != nil {
		r.abortRun(cause)
	}
}

// Unmarked is the rows of the current Run that the broker confirmed and
// that are not marked (or recorded as failed) yet: waiting for a batch, kept
// for a later one, or being written. A crash now publishes them again, as
// it does the messages not yet confirmed. 0 when no Run streams.
func (r *Relay) Unmarked() int64 {
	n := r.waitingMarks.Load()
	if u := r.unwrittenMarks.Load(); u != nil {
		n += u.Load()
	}
	return max(n, 0)
}

// MarkedThrough is the last transaction up to which the binlog path has
// settled every row: published and marked SENT, or its failure recorded
// (false before the first batch is written). Its Time tells the sweeper
// beside it which rows the binlog path has not reached yet.
func (r *Relay) MarkedThrough() (binlog.Commit, bool) {
	if c := r.marked.Load(); c != nil {
		return *c, true
	}
	return binlog.Commit{}, false
}

// Started reports whether the binlog stream and the broker are both
// connected (the relay is moving rows).
func (r *Relay) Started() bool { return r.reader.Connected() && r.BrokerConnected() }

// BrokerConnected reports whether every lane is connected to the broker.
func (r *Relay) BrokerConnected() bool {
	for _, l := range r.lanes {
		if !l.Connected() {
			return false
		}
	}
	return true
}

// New wires a relay. Rows are published on lanes (at least one): with
// several, each row goes to the lane its partition key hashes to. It fills
// cfg's zero fields with their defaults and refuses an invalid cfg with
// every bad field named by its YAML key, so a relay cannot be built
// invalid.
func New(cfg Config, reader Reader, rt *router.Router, lanes []Lane,
	marker Marker, store CheckpointStore, log *zap.Logger) (*Relay, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(lanes) == 0 {
		return nil, errors.New("relay.lanes: at least one lane is needed")
	}
	if cfg.Guard != nil {
		for _, l := range lanes {
			if g, ok := l.(guardedLane); ok {
				g.SetGuard(cfg.Guard)
			}
		}
	}
	return &Relay{cfg: cfg, reader: reader, router: rt, lanes: lanes, marker: marker, store: store, log: log,
		warn: newThrottle(cfg.WarnEvery)}, nil
}

// LastCheckpoint returns the last saved checkpoint, if any.
func (r *Relay) LastCheckpoint() (checkpoint.Checkpoint, bool) {
	c := r.lastSaved.Load()
	if c == nil {
		return checkpoint.Checkpoint{}, false
	}
	return *c, true
}

// eventsBuffer caps the channel from the binlog reader: rows in it are not
// yet weighed against the byte budget, so it is kept short whatever
// relay.buffer says.
const eventsBuffer = 16

// Run streams from start until ctx ends, then drains: the reader stops at a
// transaction boundary, in-flight messages are confirmed and marked, and the
// final checkpoint is saved. An error from any stage stops them all.
func (r *Relay) Run(ctx context.Context, start binlog.Position) error {
	hardCtx, hardCancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hardCancel(nil)
	stopDrain := context.AfterFunc(ctx, func() { time.AfterFunc(r.cfg.DrainTimeout, func() { hardCancel(nil) }) })
	defer stopDrain()
	r.abortMu.Lock()
	r.abortRun = hardCancel
	if r.abortCause != nil {
		hardCancel(r.abortCause)
	}
	r.abortMu.Unlock()

	g, gctx := errgroup.WithContext(hardCtx)
	readerCtx, cancelReader := context.WithCancel(ctx)
	defer cancelReader()
	stopReader := context.AfterFunc(gctx, cancelReader)
	defer stopReader()

	r.budget = newBudget(r.cfg.MaxInflightBytes)
	r.hold.Store(nil)
	seq, resumed := r.startSeq(start)
	if !resumed && r.cfg.SeqScope != "" && start != (binlog.Position{}) {
		if err := r.saveNewNumbering(hardCtx, start, seq); err != nil {
			return err
		}
	}
	events := make(chan binlog.Event, min(r.cfg.Buffer, eventsBuffer))
	jobs := make(chan publisher.Job[Ticket], r.cfg.Buffer)

	g.Go(func() error {
		defer close(events)
		return r.reader.Run(readerCtx, start, events)
	})
	g.Go(func() error {
		defer close(jobs)
		return r.route(gctx, ctx, events, jobs, seq, r.startReach(start))
	})
	results := r.publish(g, gctx, jobs) // lanes.go
	g.Go(func() error {
		return r.commitResults(gctx, ctx, start, seq, results)
	})
	err := g.Wait()
	if cause := context.Cause(hardCtx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // aborted
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		if hardCtx.Err() != nil {
			return fmt.Errorf("stop did not drain within %s: in-flight rows will be replayed on restart", r.cfg.DrainTimeout)
		}
		return nil
	}
	return err
}

// route turns events into publisher jobs, keeping their order. Each row
// takes its weight from the byte budget first, so it waits here (and the
// binlog waits behind it) while the rows ahead hold the budget. stop is the
// graceful stop (ctx ends only on a hard stop). Every row read takes the
// next publishing id from seq (a stream lane's; skipped or failed rows take
// theirs too, so the ids of the same rows are the same on every replay), and
// at the start of a Run the rows a run before had marked SENT are not
// published again (replaycheck.go).
func (r *Relay) route(ctx, stop context.Context, events <-chan binlog.Event, jobs chan<- publisher.Job[Ticket], seq, reach uint64) error {
	chk := r.newReplayCheck()
	chk.reach = reach
	chk.catchUp(ctx)
	defer func() { r.raiseSeqFloor(seq) }()
	for ev := range events {
		evs := chk.next(ctx, ev, events)
		for _, ev := range evs {
			var job publisher.Job[Ticket]
			switch ev.Kind {
			case binlog.KindRow:
				seq++
				if chk.skips(ev.Row) {
					continue
				}
				if r.cfg.Guard != nil {
					if err := r.cfg.Guard(); err != nil {
						return err
					}
				}
				var err error
				if job, err = r.rowJob(ctx, stop, ev.Row); err != nil {
					return err
				}
				if job.Tag == nil { // held until the stop: drop the rest
					for range events {
					}
					return nil
				}
				job.Seq = seq
			case binlog.KindCommit:
				job = publisher.Job[Ticket]{Tag: commitTicket{commit: ev.Commit, seq: seq}}
			case binlog.KindRename:
				job = publisher.Job[Ticket]{Tag: renameTicket{ev.Rename}}
			default:
				continue
			}
			select {
			case jobs <- job:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	chk.end("the end of the stream (a stop)")
	return nil
}

// rowJob routes one row and weighs it against the budget. A row of a table
// without a status column must be delivered (its failure cannot be
// recorded): it is marked MustDeliver, and when it cannot even be routed it
// goes to the dead-letter exchange, or, with none configured, the stream
// holds behind it (a Job with no Tag) until the relay is stopped.
func (r *Relay) rowJob(ctx, stop context.Context, row *outbox.Row) (publisher.Job[Ticket], error) {
	mustDeliver := row.Table.Columns.Status == ""
	msg, routeErr := r.router.Route(row)
	if routeErr == nil {
		// The body is a copy of the payload: drop the row's own copy so a
		// large payload is held once while in flight.
		delete(row.Values, row.Table.Columns.Payload)
	}
	if routeErr != nil && mustDeliver {
		if r.cfg.DeadLetterExchange == "" {
			return publisher.Job[Ticket]{}, r.holdUnroutable(ctx, stop, row, routeErr)
		}
		msg = r.unroutableMessage(row, routeErr)
	}
	w, err := r.budget.acquire(ctx, rowWeight(row, msg))
	if err != nil {
		return publisher.Job[Ticket]{}, err
	}
	switch {
	case routeErr != nil && mustDeliver:
		return publisher.Job[Ticket]{Msg: msg, Tag: &inflightRow{row: row, weight: w, unroutable: routeErr}, MustDeliver: true}, nil
	case routeErr != nil:
		return publisher.Job[Ticket]{Tag: rowFailure{row: row, err: routeErr, weight: w}}, nil
	}
	return publisher.Job[Ticket]{Msg: msg, Tag: &inflightRow{row: row, weight: w}, MustDeliver: mustDeliver}, nil
}

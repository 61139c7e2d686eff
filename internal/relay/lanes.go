package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Lane is one confirming channel: it publishes the jobs it is given in
// order and returns their results in the same order
// (publisher.Stream[Ticket]: the publisher carrying the relay's tickets).
type Lane interface {
	Run(ctx context.Context, in <-chan publisher.Job[Ticket], out chan<- publisher.Result[Ticket]) error
	Connected() bool
	Holding() (publisher.Hold, bool)
}

// KeyHash is the stable hash of a partition key that picks its lane:
// FNV-1a, 64 bits, of the key's text. It never changes between versions or
// restarts, so a key keeps its lane as long as relay.lanes does.
func KeyHash(key string) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211 // hash/fnv's
	h := uint64(offset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime64
	}
	return h
}

// LaneOf returns the lane of a message among n, and the hash of its key
// (0 for a message without one). A row whose partition key has a NULL
// column, or whose table has none (only possible with one lane), has no
// key: it goes to lane 0, in commit order with the other rows there.
func LaneOf(msg *router.Message, n int) (lane int, key uint64) {
	if msg == nil || !msg.Keyed {
		return 0, 0
	}
	key = KeyHash(msg.PartitionKey)
	return int(key % uint64(n)), key
}

// laneSet runs several lanes as one ordered stage. The dispatcher hands
// each row to its lane and notes, in order, which lane it went to (markers,
// the commits and the rows that were not published, are noted with the job
// itself); the merger reads that order and takes each result from its
// lane, so the committer sees every result in binlog order, exactly as
// from a single lane. That is what keeps the checkpoint rule unchanged: a
// commit is applied only once every row before it, on every lane, is
// settled. The order channel's capacity bounds how far the lanes run ahead
// of the slowest one: while one lane holds, the others go on until
// relay.buffer × lanes rows in all wait behind the held row, then the
// stream waits too. A crash replays at most those rows and the ones settled
// since the last checkpoint save.
type laneSet struct {
	lanes []Lane
	order chan slot
	in    []chan publisher.Job[Ticket]
	out   []chan publisher.Result[Ticket]
	// inflight counts, per lane, the rows handed to it and not yet merged.
	inflight []atomic.Int64
	// ended is each lane's Run error, set before its out is closed.
	ended []error
}

// slot is one job's place in the order: the lane it went to (lane -1 for
// a marker that no lane publishes), and the job, so a result is paired
// with its own slot, never with the next one of its lane.
type slot struct {
	lane int
	job  publisher.Job[Ticket]
}

func newLaneSet(lanes []Lane, buffer int) *laneSet {
	n := len(lanes)
	s := &laneSet{lanes: lanes, order: make(chan slot, buffer*n), in: make([]chan publisher.Job[Ticket], n),
		out: make([]chan publisher.Result[Ticket], n), inflight: make([]atomic.Int64, n), ended: make([]error, n)}
	for i := range lanes {
		s.in[i] = make(chan publisher.Job[Ticket], buffer)
		s.out[i] = make(chan publisher.Result[Ticket], buffer)
	}
	return s
}

// publish runs the lanes on g and returns their results in job order. One
// lane is the publisher alone, as before lanes existed.
func (r *Relay) publish(g *errgroup.Group, ctx context.Context, jobs <-chan publisher.Job[Ticket]) <-chan publisher.Result[Ticket] {
	results := make(chan publisher.Result[Ticket], r.cfg.Buffer)
	if len(r.lanes) == 1 {
		g.Go(func() error {
			defer close(results)
			return r.lanes[0].Run(ctx, jobs, results)
		})
		return results
	}
	s := newLaneSet(r.lanes, r.cfg.Buffer)
	r.laneSet.Store(s)
	for i, l := range s.lanes {
		g.Go(func() error {
			err := l.Run(ctx, s.in[i], s.out[i])
			s.ended[i] = err // read by merge once out is closed
			close(s.out[i])
			return err
		})
	}
	g.Go(func() error {
		defer s.closeInputs()
		return s.dispatch(ctx, jobs)
	})
	g.Go(func() error {
		defer close(results)
		return s.merge(ctx, results)
	})
	return results
}

func (s *laneSet) closeInputs() {
	close(s.order)
	for _, in := range s.in {
		close(in)
	}
}

// dispatch hands each job to its lane (Job.Key set for strict ordering per
// key) and notes its place in the order first, so the merger never waits
// for a job that no lane has.
func (s *laneSet) dispatch(ctx context.Context, jobs <-chan publisher.Job[Ticket]) error {
	n := len(s.lanes)
	for job := range jobs {
		sl := slot{lane: -1}
		if job.Msg != nil {
			sl.lane, job.Key = LaneOf(job.Msg, n)
		}
		sl.job = job
		select {
		case s.order <- sl:
		case <-ctx.Done():
			return ctx.Err()
		}
		if sl.lane < 0 {
			continue
		}
		s.inflight[sl.lane].Add(1)
		select {
		case s.in[sl.lane] <- job:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// errLaneEnded: a lane stopped before returning a result it owed without
// an error of its own (a bug: a lane returns every result or fails).
var errLaneEnded = errors.New("a lane ended with results outstanding")

// errWrongResult: a lane returned a result that is not its next job's.
var errWrongResult = errors.New("a lane returned a result out of its order")

// merge returns the results in the order the dispatcher noted. A lane that
// failed hands on only the results before its first unsettled row (a
// stream lane; an AMQP lane retries): merge stops at that row's slot with
// the lane's error, so no result, and no commit behind it, passes it.
func (s *laneSet) merge(ctx context.Context, results chan<- publisher.Result[Ticket]) error {
	for sl := range s.order {
		res := publisher.Result[Ticket]{Job: sl.job}
		if sl.lane >= 0 {
			var ok bool
			select {
			case res, ok = <-s.out[sl.lane]:
				if !ok {
					if err := s.ended[sl.lane]; err != nil {
						return err
					}
					return fmt.Errorf("lane %d: %w", sl.lane, errLaneEnded)
				}
				if res.Job.Tag != sl.job.Tag {
					return fmt.Errorf("lane %d: %w", sl.lane, errWrongResult)
				}
			case <-ctx.Done():
				return ctx.Err()
			}
			s.inflight[sl.lane].Add(-1)
		}
		select {
		case results <- res:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// LaneInflight returns, per lane, the rows handed to it whose results have
// not yet been returned in order (nil with one lane, or before Run).
func (r *Relay) LaneInflight() []int64 {
	s := r.laneSet.Load()
	if s == nil {
		return nil
	}
	out := make([]int64, len(s.inflight))
	for i := range s.inflight {
		out[i] = s.inflight[i].Load()
	}
	return out
}

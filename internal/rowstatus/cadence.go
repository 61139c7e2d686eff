package rowstatus

import "time"

// Cadence decides when the binlog path's confirmed rows are handed to the
// mark writer, and how many may wait unmarked.
//
// Every mark is a transaction on the primary that the source replica
// applies in commit order among the application's own, and that the relay
// reads back from the replica's binlog. Many small marks cost the replica
// more than a few large ones, and the replica is the one that lags; large
// marks, though, leave more rows confirmed and not yet marked, which a
// crash publishes again. So the batch grows while the replica lags (its
// rows come in late, or the writer is still busy with the last batch) and
// shrinks back when it keeps up, and never more than MaxUnmarked confirmed
// rows wait unmarked: past that, confirmations wait for the writer. That
// ceiling bounds the duplicates a SIGKILL costs.
//
// The zero Cadence is not usable: NewCadence fills and bounds the fields.
type Cadence struct {
	// MinBatch is the batch target while the replica keeps up; MaxBatch
	// the most rows one mark names (relay.batch_size).
	MinBatch, MaxBatch int
	// MaxUnmarked is the most confirmed rows that may wait unmarked, in
	// the committer and in batches handed and not written yet
	// (relay.max_unmarked).
	MaxUnmarked int
	// Interval is the longest a confirmed row waits at the smallest target
	// (relay.flush_interval); at larger targets it stretches up to
	// MaxInterval, in proportion.
	Interval, MaxInterval time.Duration
	// LagHigh is the delay behind the primary (a row's commit to its
	// confirm) past which the replica counts as lagging.
	LagHigh time.Duration

	target int
}

// NewCadence returns a cadence with the fields bounded: MaxBatch at least
// 1 and at most half of MaxUnmarked (at least 1), MinBatch between 1 and
// MaxBatch, MaxInterval at least Interval, LagHigh two seconds when
// unset; MinBatch a quarter of MaxBatch when unset.
func NewCadence(c Cadence) *Cadence {
	c.MaxBatch = max(c.MaxBatch, 1)
	c.MaxUnmarked = max(c.MaxUnmarked, 1)
	if c.MinBatch <= 0 {
		c.MinBatch = max(c.MaxBatch/4, 1)
	}
	// Half the ceiling at most: one batch is written while the next
	// gathers, rather than every confirm waiting for each mark.
	c.MaxBatch = min(c.MaxBatch, max(c.MaxUnmarked/2, 1))
	c.MinBatch = min(c.MinBatch, c.MaxBatch)
	c.MaxInterval = max(c.MaxInterval, c.Interval)
	if c.LagHigh <= 0 {
		c.LagHigh = 2 * time.Second
	}
	c.target = c.MinBatch
	return &c
}

// Target is the rows a batch gathers before it is handed over.
func (c *Cadence) Target() int { return c.target }

// Wait is how long the oldest confirmed row waits at most before a batch
// is handed over anyway: Interval at MinBatch, up to MaxInterval at
// MaxBatch.
func (c *Cadence) Wait() time.Duration {
	if c.MaxBatch == c.MinBatch {
		return c.Interval
	}
	span := c.MaxInterval - c.Interval
	return c.Interval + span*time.Duration(c.target-c.MinBatch)/time.Duration(c.MaxBatch-c.MinBatch)
}

// Full tells whether pending rows (gathered, not handed over) make a batch
// now: the target is reached, or the unmarked rows (pending ones included)
// reached the ceiling, so the writer must have them before more come.
func (c *Cadence) Full(pending, unmarked int) bool {
	return pending > 0 && (pending >= c.target || unmarked >= c.MaxUnmarked)
}

// Admit tells whether one more confirmed row may be taken while unmarked
// rows wait; when not, the caller hands over what it gathered and waits for
// the writer.
func (c *Cadence) Admit(unmarked int) bool { return unmarked < c.MaxUnmarked }

// Adapt moves the target after a hand-over: doubled while the replica lags
// (lag past LagHigh) or the writer was still busy with an earlier batch,
// halved when neither, within MinBatch and MaxBatch.
func (c *Cadence) Adapt(lag time.Duration, writerBusy bool) {
	if lag > c.LagHigh || writerBusy {
		c.target = min(c.target*2, c.MaxBatch)
		return
	}
	c.target = max(c.target/2, c.MinBatch)
}

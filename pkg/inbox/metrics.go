package inbox

import (
	"sync/atomic"
	"time"
)

// Metrics receives one call per delivery outcome. Implementations must be safe for
// concurrent use and fast: they run on the worker goroutines. Wire them to Prometheus,
// expvar or anything else; the package itself depends on none.
type Metrics interface {
	// Processed: the handler's work committed; d is the time spent in the inbox
	// (transaction included).
	Processed(d time.Duration)
	// Duplicate: the delivery was recognised and ACKed without work.
	Duplicate()
	// Retry: the handler failed and the message was scheduled for a retry.
	Retry()
	// Failed: the message was recorded FAILED.
	Failed()
}

// NopMetrics ignores everything.
type NopMetrics struct{}

// Processed counts nothing.
func (NopMetrics) Processed(time.Duration) {}

// Duplicate counts nothing.
func (NopMetrics) Duplicate() {}

// Retry counts nothing.
func (NopMetrics) Retry() {}

// Failed counts nothing.
func (NopMetrics) Failed() {}

// Counters is a Metrics that counts, for expvar-style export and for tests.
type Counters struct {
	processed, duplicates, retries, failed atomic.Int64
}

// Processed counts a delivery with the Processed outcome.
func (c *Counters) Processed(time.Duration) { c.processed.Add(1) }

// Duplicate counts a delivery with the Duplicate outcome.
func (c *Counters) Duplicate() { c.duplicates.Add(1) }

// Retry counts a failed attempt scheduled for a retry.
func (c *Counters) Retry() { c.retries.Add(1) }

// Failed counts a message recorded FAILED.
func (c *Counters) Failed() { c.failed.Add(1) }

// Snapshot is a point-in-time copy of Counters.
type Snapshot struct {
	Processed, Duplicates, Retries, Failed int64
}

// Total is the number of deliveries that were ACKed.
func (s Snapshot) Total() int64 { return s.Processed + s.Duplicates + s.Retries + s.Failed }

// Snapshot reads the counters.
func (c *Counters) Snapshot() Snapshot {
	return Snapshot{
		Processed:  c.processed.Load(),
		Duplicates: c.duplicates.Load(),
		Retries:    c.retries.Load(),
		Failed:     c.failed.Load(),
	}
}

func recordOutcome(m Metrics, o Outcome, d time.Duration) {
	switch o {
	case Processed:
		m.Processed(d)
	case Duplicate:
		m.Duplicate()
	case RetryScheduled:
		m.Retry()
	case Failed:
		m.Failed()
	}
}

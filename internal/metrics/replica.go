package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Replica is what the replica-health metrics read at scrape time: the
// source replica's IO and SQL thread state and the relay's delay behind the
// primary (internal/app polls them).
type Replica interface {
	// Threads reports the replication threads of the source; ok is false
	// when the source is not a replica or its state is not known yet.
	Threads() (io, sql, ok bool)
	// Delay is how long a position the primary had has gone unstreamed by
	// the relay; ok is false when it cannot be measured (no relay running).
	Delay(now time.Time) (time.Duration, bool)
}

// Gap kinds, the values of gaps_total's "handling" label.
const (
	// GapSweeper: the rows in the gap stay PENDING for the sweeper.
	GapSweeper = "sweeper"
	// GapAccepted: the operator accepted the loss (run --accept-gap).
	GapAccepted = "accepted"
)

type replicaCollector struct {
	running, delay *prometheus.Desc
	gaps           *prometheus.CounterVec

	mu  sync.Mutex
	src Replica
	now func() time.Time
}

func newReplicaCollector(register func(prometheus.Collector)) *replicaCollector {
	c := &replicaCollector{
		running: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "source_replica_running"),
			"1 when the source replica's replication thread (io or sql) runs; absent when the source is not a replica.", []string{"thread"}, nil),
		delay: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "source_delay_seconds"),
			"End-to-end delay: how long the oldest primary GTID position the relay has not streamed yet has been on the primary "+
				"(read from the primary every few seconds, so up to that much lower than the truth). 0 when the relay has everything; "+
				"grows when the source replica stops applying or the stream is stuck.", nil, nil),
		now: time.Now,
	}
	c.gaps = counterVec(register, "gaps_total", "Times the relay restarted at the source's current position because its saved position was purged "+
		"(handling: sweeper = rows in the gap stay PENDING for the sweeper; accepted = the operator accepted the loss with run --accept-gap).", "handling")
	register(c)
	return c
}

// Describe implements prometheus.Collector.
func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.running
	ch <- c.delay
}

// Collect implements prometheus.Collector.
func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	if src == nil {
		return
	}
	if io, sql, ok := src.Threads(); ok {
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, boolFloat(io), "io")
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, boolFloat(sql), "sql")
	}
	if d, ok := src.Delay(c.now()); ok {
		ch <- prometheus.MustNewConstMetric(c.delay, prometheus.GaugeValue, d.Seconds())
	}
}

// WatchReplica makes the source replica's health visible as
// source_replica_running{thread} and source_delay_seconds.
func (m *Metrics) WatchReplica(r Replica) {
	m.replica.mu.Lock()
	defer m.replica.mu.Unlock()
	m.replica.src = r
}

// Gap counts one restart at the current position over a purged one.
func (m *Metrics) Gap(handling string) { m.replica.gaps.WithLabelValues(handling).Inc() }

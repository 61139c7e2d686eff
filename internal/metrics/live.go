package metrics

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// Stream is what the live metrics read from the binlog reader.
type Stream interface {
	Lag(now time.Time) time.Duration
	LastCommit() (binlog.Commit, bool)
	Connected() bool
}

// Conn is anything with a connection state.
type Conn interface{ Connected() bool }

// ConnFunc adapts a function to Conn.
type ConnFunc func() bool

// Connected calls f.
func (f ConnFunc) Connected() bool { return f() }

// Connection targets, the values of the connection_up "target" label.
const (
	TargetSource = "source"
	TargetBroker = "broker"
	TargetRedis  = "redis"
)

// liveCollector reads state at scrape time: lag, positions, connection
// state. Nothing here is updated per row.
type liveCollector struct {
	lag, fileSeq, pos, gtid, cpAge, cpFileSeq, cpPos, cpSaved, up, ready, held, republished, leader, laneInflight, unmarked, brokerNode *prometheus.Desc

	mu      sync.Mutex
	stream  Stream
	conns   map[string]Conn
	readyF  func() bool
	leaderF func() bool
	heldF   func() time.Duration
	repubF  func() uint64
	lanesF  func() []int64
	unmarkF func() int64
	nodesF  func() []string
	cp      *checkpoint.Checkpoint
	now     func() time.Time
}

func newLiveCollector() *liveCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
	}
	return &liveCollector{
		lag: d("binlog_lag_seconds", "How far the binlog stream is behind the source: the last event's timestamp against its arrival, "+
			"plus any silence longer than the heartbeat period. Stays near 0 when the source is idle (heartbeats arrive); grows when the stream is stuck or cut."),
		// The file is not a label: every rotation would start a new series
		// and leave the old one behind.
		fileSeq:   d("binlog_file_sequence", "Numeric suffix of the binlog file of the last whole transaction read (binlog.000042 gives 42)."),
		pos:       d("binlog_offset", "Byte offset (end of the last whole transaction read) in the file binlog_file_sequence names."),
		gtid:      d("binlog_gtid_sequence", "Sequence number of the last transaction read, by GTID source (MariaDB domain-server, MySQL source UUID).", "gtid_source"),
		cpAge:     d("checkpoint_age_seconds", "Time since the last checkpoint was saved. Saves happen only when transactions were read, so this grows on an idle source; watch lag for stalls."),
		cpFileSeq: d("checkpoint_file_sequence", "Numeric suffix of the binlog file of the saved checkpoint."),
		cpPos:     d("checkpoint_offset", "Byte offset of the saved checkpoint in the file checkpoint_file_sequence names."),
		cpSaved:   d("checkpoint_saved_timestamp_seconds", "Unix time the last checkpoint was saved."),
		up:        d("connection_up", "1 when the connection is up: source (binlog stream), broker (RabbitMQ), redis (checkpoint store).", "target"),
		ready:     d("ready", "1 when /readyz reports ready."),
		held: d("publish_held_seconds", "How long publishing has been held behind one message (strict ordering, a message of a table "+
			"without a status column that the broker refuses and no dead-letter exchange, or a row that cannot be routed); 0 when not holding."),
		republished: d("republished_total", "Messages published again because an earlier publish had an unknown fate (unconfirmed when "+
			"the broker connection was lost, or when the broker closed the channel over a refusal it did not pin on one message: "+
			"an exchange deleted or a permission revoked while messages to it were in flight). Each is a possible duplicate."),
		leader: d("leader", "1 on the relay that streams the binlog: the holder of the leader lease with ha.enabled, or a relay "+
			"without ha.enabled once its binlog path runs; 0 on a standby. The relays of one name sum to 1."),
		laneInflight: d("lane_inflight_rows", "Rows handed to a lane (relay.lanes above 1) whose results are not yet back in commit order: "+
			"published or waiting behind that lane's head. A crash replays at most these and the rows settled since the last checkpoint save.", "lane"),
		unmarked: d("unmarked_rows", "Rows the broker confirmed that are not marked SENT yet: waiting for the next batch of marks, "+
			"kept for a later one, or being written (at most relay.max_unmarked). A crash now would publish these again, "+
			"beside the messages not yet confirmed (up to broker.window on each lane); 0 on a standby."),
		brokerNode: d("broker_node_info", "1 for each broker node (its URL from broker.url or broker.urls, password hidden) a broker "+
			"connection of the relay is open to; absent while none is. With broker.urls it names the node of the cluster in use: "+
			"the publishers move to the next node when theirs fails.", "node"),
		conns: map[string]Conn{},
		now:   time.Now,
	}
}

// Describe implements prometheus.Collector.
func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lag, c.fileSeq, c.pos, c.gtid, c.cpAge, c.cpFileSeq, c.cpPos, c.cpSaved, c.up, c.ready, c.held, c.republished, c.leader, c.laneInflight, c.unmarked, c.brokerNode} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	stream, readyF, leaderF, heldF, repubF, lanesF, unmarkF, nodesF, cp := c.stream, c.readyF, c.leaderF, c.heldF, c.repubF, c.lanesF, c.unmarkF, c.nodesF, c.cp
	conns := make(map[string]Conn, len(c.conns))
	for k, v := range c.conns {
		conns[k] = v
	}
	c.mu.Unlock()
	now := c.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if stream != nil {
		gauge(c.lag, stream.Lag(now).Seconds())
		if last, ok := stream.LastCommit(); ok {
			if last.File != "" {
				if seq, ok := FileSequence(last.File); ok {
					gauge(c.fileSeq, float64(seq))
				}
				gauge(c.pos, float64(last.Pos))
			}
			if src, seq, ok := SplitGTID(last.GTID.String()); ok {
				gauge(c.gtid, float64(seq), src)
			}
		}
	}
	if cp != nil {
		gauge(c.cpAge, now.Sub(cp.SavedAt).Seconds())
		gauge(c.cpSaved, float64(cp.SavedAt.UnixNano())/1e9)
		if cp.File != "" {
			if seq, ok := FileSequence(cp.File); ok {
				gauge(c.cpFileSeq, float64(seq))
			}
			gauge(c.cpPos, float64(cp.Pos))
		}
	}
	for target, conn := range conns {
		gauge(c.up, boolFloat(conn.Connected()), target)
	}
	if readyF != nil {
		gauge(c.ready, boolFloat(readyF()))
	}
	if leaderF != nil {
		gauge(c.leader, boolFloat(leaderF()))
	}
	if heldF != nil {
		gauge(c.held, heldF().Seconds())
	}
	if repubF != nil {
		ch <- prometheus.MustNewConstMetric(c.republished, prometheus.CounterValue, float64(repubF()))
	}
	if lanesF != nil {
		for i, n := range lanesF() {
			gauge(c.laneInflight, float64(n), strconv.Itoa(i))
		}
	}
	if unmarkF != nil {
		gauge(c.unmarked, float64(unmarkF()))
	}
	if nodesF != nil {
		seen := map[string]bool{}
		for _, n := range nodesF() {
			if !seen[n] {
				seen[n] = true
				gauge(c.brokerNode, 1, n)
			}
		}
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *liveCollector) setCheckpoint(cp checkpoint.Checkpoint) {
	c.mu.Lock()
	c.cp = &cp
	c.mu.Unlock()
}

// WatchStream makes the binlog reader's lag and position (and its
// connection, as target "source") visible.
func (m *Metrics) WatchStream(s Stream) {
	m.live.mu.Lock()
	defer m.live.mu.Unlock()
	m.live.stream = s
	m.live.conns[TargetSource] = s
}

// ForgetStream drops what only a relay that streams reports: the binlog
// stream's lag and position, the source and broker connections and the last
// checkpoint. An HA leader that lost its lease calls it, so as a standby it
// does not go on exporting a dead stream (a growing lag, a source "down").
func (m *Metrics) ForgetStream() {
	m.live.mu.Lock()
	defer m.live.mu.Unlock()
	m.live.stream = nil
	delete(m.live.conns, TargetSource)
	delete(m.live.conns, TargetBroker)
	m.live.nodesF = nil
	m.live.cp = nil
}

// WatchConn makes a connection's state visible as connection_up{target}.
func (m *Metrics) WatchConn(target string, c Conn) {
	m.live.mu.Lock()
	defer m.live.mu.Unlock()
	m.live.conns[target] = c
}

// WatchBrokerNodes exports the broker nodes the relay's connections are
// open to as binlog_relay_broker_node_info{node}; f returns redacted URLs.
func (m *Metrics) WatchBrokerNodes(f func() []string) {
	setWatched(&m.live.mu, &m.live.nodesF, f)
}

// WatchReady exports the readiness verdict as binlog_relay_ready.
func (m *Metrics) WatchReady(f func() bool) {
	setWatched(&m.live.mu, &m.live.readyF, f)
}

// WatchLeader exports whether this relay leads (streams the binlog) as
// binlog_relay_leader.
func (m *Metrics) WatchLeader(f func() bool) {
	setWatched(&m.live.mu, &m.live.leaderF, f)
}

// WatchHold exports how long publishing has been held (0 when it is not)
// as binlog_relay_publish_held_seconds.
func (m *Metrics) WatchHold(f func() time.Duration) {
	setWatched(&m.live.mu, &m.live.heldF, f)
}

// WatchRepublished exports the publisher's count of messages published
// again after an unknown fate as binlog_relay_republished_total.
func (m *Metrics) WatchRepublished(f func() uint64) {
	setWatched(&m.live.mu, &m.live.repubF, f)
}

// WatchLanes exports the rows in flight on each lane as
// binlog_relay_lane_inflight_rows{lane}; f returns nothing with one lane.
func (m *Metrics) WatchLanes(f func() []int64) {
	setWatched(&m.live.mu, &m.live.lanesF, f)
}

// WatchUnmarked exports the rows confirmed and not yet marked SENT as
// binlog_relay_unmarked_rows (relay.Relay.Unmarked).
func (m *Metrics) WatchUnmarked(f func() int64) {
	setWatched(&m.live.mu, &m.live.unmarkF, f)
}

// FileSequence is the numeric suffix of a binlog file name: both servers
// name their binlogs basename.NNNNNN and count up by one at each rotation
// (binlog.000042 gives 42).
func FileSequence(file string) (uint64, bool) {
	i := strings.LastIndexByte(file, '.')
	if i < 0 || i == len(file)-1 {
		return 0, false
	}
	n, err := strconv.ParseUint(file[i+1:], 10, 64)
	return n, err == nil
}

// SplitGTID splits one transaction's GTID into its source and sequence
// number: "0-1-42" (MariaDB domain-server-seq) gives ("0-1", 42),
// "3E11FA47-71CA-11E1-9E33-C80AA9429562:42" (MySQL uuid:gno) gives the
// uuid and 42. The full GTID is not a label: it changes with every
// transaction and would make a new series each time.
func SplitGTID(g string) (source string, seq uint64, ok bool) {
	i := strings.LastIndexAny(g, ":-")
	if i <= 0 || i == len(g)-1 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(g[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return g[:i], n, true
}

// setWatched stores a watched function under the lock the scrape reads it
// with.
func setWatched[T any](mu sync.Locker, dst *T, f T) {
	mu.Lock()
	defer mu.Unlock()
	*dst = f
}

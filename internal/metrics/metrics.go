// Package metrics is the relay's Prometheus instrumentation: per-row
// outcomes (it implements relay.Observer), the live state of the binlog
// stream and the connections (read at scrape time), the outbox backlog read
// from the replica on an interval (Backlog), and RabbitMQ queue depth from
// the management API (Queues). Every metric is named binlog_relay_*, carries
// the relay's name as the label "name" (so the relays of one name, a leader
// and its standbys, aggregate with max by (name)) and lives in a registry of
// its own, so several relays can run in one process.
package metrics

import (
	"errors"
	"maps"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Namespace prefixes every metric.
const Namespace = "binlog_relay"

// Metrics holds one relay's metrics.
type Metrics struct {
	reg *prometheus.Registry

	published  *prometheus.CounterVec
	failed     *prometheus.CounterVec
	returned   *prometheus.CounterVec
	marked     *prometheus.CounterVec
	markStmts  *prometheus.CounterVec
	already    *prometheus.CounterVec
	replaySkip *prometheus.CounterVec
	deadLet    *prometheus.CounterVec
	claims     *prometheus.CounterVec
	saves      prometheus.Counter
	confirm    prometheus.Histogram
	commit     prometheus.Histogram

	outboxRows      *prometheus.GaugeVec
	oldestPending   *prometheus.GaugeVec
	retryRatio      *prometheus.GaugeVec
	outboxErrors    *prometheus.CounterVec
	outboxLastQuery *prometheus.GaugeVec

	queueMessages *prometheus.GaugeVec
	queueReady    *prometheus.GaugeVec
	queueUnacked  *prometheus.GaugeVec
	queueConsumer *prometheus.GaugeVec
	queueErrors   prometheus.Counter

	headersOmitted *prometheus.CounterVec
	tablesMatched  *prometheus.GaugeVec
	tablesRefused  *prometheus.GaugeVec
	tableChanges   *prometheus.CounterVec
	buildInfo      *prometheus.GaugeVec

	live      *liveCollector
	recent    *Recent // the last hour, for the console (recent.go)
	replica   *replicaCollector
	reconcile reconcileMetrics

	// exchange bounds the exchange label, the one label whose values come
	// from row data (table names come from the config, reasons and statuses
	// are fixed sets).
	exchange *labelLimit
	// tables bounds the table label for tables matched by pattern entries
	// (tables.go); backlog aggregates the backlog gauges of the tables
	// counted under their entry.
	tables  *tableLabels
	backlog *backlogAggregate

	// Per-row counters by (table, exchange label), so the settle stage does
	// not build label strings for every row. Keyed by the bounded label
	// value, so it holds at most tables x (max_label_values + 1) entries.
	rowCounters sync.Map // rowKey -> prometheus.Counter
	names       sync.Map // *outbox.Table -> string (configured tables only)
}

// Config bounds what row data can do to the metrics.
type Config struct {
	// Name is the relay's name, the value of the "name" label every
	// binlog_relay_* metric carries. Empty: no such label.
	Name string
	// MaxLabelValues is the most distinct values a label fed from row data
	// (exchange) takes; later values are counted under "other". 0 means
	// DefaultMaxLabelValues.
	MaxLabelValues int
	// MaxTableSeries is how many tables matched by pattern entries keep
	// per-table series; later ones are counted under their entry's pattern
	// (tables.go). 0 means DefaultMaxTableSeries.
	MaxTableSeries int
}

type rowKey struct {
	t        *outbox.Table
	exchange string
}

// New registers every metric in a fresh registry, with the defaults and no
// log (see NewWith).
func New() *Metrics { return NewWith(Config{}, zap.NewNop()) }

// NewWith registers every metric in a fresh registry, with the Go runtime
// and process collectors beside them. log gets the one-time warning when a
// label reaches cfg.MaxLabelValues.
func NewWith(cfg Config, log *zap.Logger) *Metrics {
	if cfg.MaxLabelValues <= 0 {
		cfg.MaxLabelValues = DefaultMaxLabelValues
	}
	if cfg.MaxTableSeries <= 0 {
		cfg.MaxTableSeries = DefaultMaxTableSeries
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var own prometheus.Registerer = reg
	if cfg.Name != "" {
		own = prometheus.WrapRegistererWith(prometheus.Labels{"name": cfg.Name}, reg)
	}
	f := func(c prometheus.Collector) { own.MustRegister(c) }
	m := &Metrics{reg: reg, exchange: newLabelLimit("exchange", cfg.MaxLabelValues, log), recent: newRecent(),
		tables: newTableLabels(cfg.MaxTableSeries, log), backlog: newBacklogAggregate()}
	m.published = counterVec(f, "messages_published_total", "Outbox rows confirmed by the broker and routed to at least one queue.", "table", "exchange")
	m.failed = counterVec(f, "messages_failed_total", "Outbox rows that failed (sent to the retry path or FAILED), by reason: route, returned, nacked, too_large, no_exchange, refused, field_too_long, other.", "table", "exchange", "reason")
	m.returned = counterVec(f, "messages_returned_total", "Outbox rows the broker returned as unroutable (basic.return); also counted in messages_failed_total.", "table", "exchange")
	m.deadLet = counterVec(f, "dead_lettered_total", "Rows of tables without a status column sent to the dead-letter exchange (broker.dead_letter_exchange) because their own exchange refused them or they could not be routed.", "table")
	m.marked = counterVec(f, "rows_marked_sent_total", "Outbox rows this relay moved to SENT on the primary.", "table")
	m.markStmts = counterVec(f, "mark_statements_total", "SENT statements this relay's binlog path ran on the primary: rows_marked_sent_total over it is the rows one statement carries.", "table")
	m.already = counterVec(f, "published_already_sent_total", "Outbox rows the binlog path or the sweeper published that were already SENT (or otherwise no longer theirs to mark) "+
		"when they came to mark them: rows a run killed before its checkpoint save had marked, published again after the restart, "+
		"rows the sweeper sent meanwhile, or rows a sweeper sent that the binlog path sent and marked meanwhile (a relay frozen or far behind). "+
		"Each is a duplicate delivery; the count misses the rows a crash left published but unmarked.", "table")
	m.replaySkip = counterVec(f, "replay_skipped_total", "Outbox rows read again at the start of a stream (a restart, a failover, a new leader) that the source replica showed SENT already: "+
		"a run before had published and marked them, so they were not published again.", "table")
	m.claims = counterVec(f, "sweeper_claims_total", "Outbox rows the sweeper claimed on the primary.", "table")
	m.saves = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "checkpoints_total", Help: "Checkpoints saved to Redis."})
	f(m.saves)
	m.confirm = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "publish_confirm_seconds",
		Help:    "Time from publish to the broker's confirm, per published row.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	f(m.confirm)
	m.commit = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "commit_to_confirm_seconds",
		Help:    "Time from the source's commit (binlog event timestamp, whole seconds) to the broker's confirm, per published row.",
		Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}})
	f(m.commit)

	m.outboxRows = gaugeVec(f, "outbox_rows", "Outbox rows by status (PENDING, SENDING, FAILED), counted on the replica every backlog interval.", "table", "status")
	m.oldestPending = gaugeVec(f, "outbox_oldest_pending_age_seconds", "Age of the oldest PENDING row (from its created-at column), 0 when none; read on the replica.", "table")
	m.retryRatio = gaugeVec(f, "outbox_retry_ratio", "Of the rows updated in the last hour, the share with retry_count >= 3; read on the replica.", "table")
	m.outboxErrors = counterVec(f, "outbox_query_errors_total", "Backlog queries on the replica that failed.", "table")
	m.outboxLastQuery = gaugeVec(f, "outbox_last_query_timestamp_seconds", "Unix time of the last successful backlog query on the replica.", "table")

	m.queueMessages = gaugeVec(f, "queue_messages", "Messages in a RabbitMQ queue (ready + unacknowledged), from the management API.", "vhost", "queue")
	m.queueReady = gaugeVec(f, "queue_messages_ready", "Messages ready for delivery in a RabbitMQ queue.", "vhost", "queue")
	m.queueUnacked = gaugeVec(f, "queue_messages_unacknowledged", "Messages delivered but not yet acknowledged in a RabbitMQ queue.", "vhost", "queue")
	m.queueConsumer = gaugeVec(f, "queue_consumers", "Consumers of a RabbitMQ queue.", "vhost", "queue")
	m.queueErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "queue_query_errors_total", Help: "Management API requests that failed."})
	f(m.queueErrors)

	m.headersOmitted = counterVec(f, "headers_omitted_total", "Rows published without a header their table maps (trace, cloudevents) because the row's value "+
		"does not fit it: header traceparent (not W3C trace context: traceparent and tracestate left out), tracestate (left out alone), "+
		"ce-source or ce-type (no ce-* header at all), ce-time.", "table", "header")
	m.tablesMatched = gaugeVec(f, "tables_matched", "Tables a pattern entry under tables: matches and the relay reads now, per entry.", "entry")
	m.tablesRefused = gaugeVec(f, "tables_refused", "Tables a pattern entry matches whose rows are not read: their columns do not fit the entry's mapping, "+
		"or two entries match them (the log says which); per entry.", "entry")
	m.tableChanges = counterVec(f, "table_changes_total", "Tables of pattern entries met in the binlog: added (created, renamed into a match, or first written), "+
		"dropped (DROP, renamed away) or refused.", "entry", "change")
	m.buildInfo = gaugeVec(f, "build_info", "Always 1; the labels say which build runs: version, go (the Go release) and commit.", "version", "go", "commit")

	m.live = newLiveCollector()
	f(m.live)
	m.replica = newReplicaCollector(f)
	m.reconcile = newReconcileMetrics(f)
	return m
}

func counterVec(register func(prometheus.Collector), name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	register(v)
	return v
}

func gaugeVec(register func(prometheus.Collector), name, help string, labels ...string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	register(v)
	return v
}

// Registry is where the metrics live (for tests and extra collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Names lists every binlog_relay_* metric name, sorted (for docs and the
// checks that dashboards and alerts use only real names).
func (m *Metrics) Names() []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() { m.reg.Describe(ch); close(ch) }()
	seen := map[string]bool{}
	for d := range ch {
		if n := fqName.FindStringSubmatch(d.String()); n != nil && strings.HasPrefix(n[1], Namespace+"_") {
			seen[n[1]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// tableName is the table label value for t: its name, or its entry's
// pattern once metrics.max_table_series matched tables have series of
// their own (tables.go).
func (m *Metrics) tableName(t *outbox.Table) string {
	if n, ok := m.names.Load(t); ok {
		return n.(string)
	}
	n, _ := m.tables.label(t)
	m.names.Store(t, n)
	return n
}

// Published counts a confirmed, routed row and its latencies.
func (m *Metrics) Published(t *outbox.Table, exchange string, confirm, sinceCommit time.Duration) {
	k := rowKey{t, m.exchange.value(exchange)}
	c, ok := m.rowCounters.Load(k)
	if !ok {
		c, _ = m.rowCounters.LoadOrStore(k, m.published.WithLabelValues(m.tableName(t), k.exchange))
	}
	c.(prometheus.Counter).Inc()
	if confirm > 0 {
		m.confirm.Observe(confirm.Seconds())
	}
	m.recent.published(confirm)
	if sinceCommit > 0 {
		m.commit.Observe(sinceCommit.Seconds())
	}
}

// Failed counts a row sent to the retry path or FAILED.
func (m *Metrics) Failed(t *outbox.Table, exchange string, reason error) {
	name, label := m.tableName(t), m.exchange.value(exchange)
	m.failed.WithLabelValues(name, label, FailureReason(exchange, reason)).Inc()
	m.recent.failed()
	if errors.Is(reason, publisher.ErrReturned) {
		m.returned.WithLabelValues(name, label).Inc()
	}
}

// FailureReason is the reason label for a failed row: route (it could not
// be routed: no exchange), returned, nacked, too_large, no_exchange (the
// exchange does not exist), refused (403/406 and other per-message channel
// errors), field_too_long (a name or header over an AMQP limit) or other.
func FailureReason(exchange string, err error) string {
	for _, r := range failureReasons {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	if exchange == "" {
		return "route"
	}
	return "other"
}

// failureReasons are the publisher's per-message errors and their reason
// labels, in the order they are tried.
var failureReasons = []struct {
	err   error
	label string
}{
	{publisher.ErrReturned, "returned"},
	{publisher.ErrNacked, "nacked"},
	{publisher.ErrTooLarge, "too_large"},
	{publisher.ErrNoExchange, "no_exchange"},
	{publisher.ErrRefused, "refused"},
	{publisher.ErrFieldTooLong, "field_too_long"},
}

// DeadLettered counts a row sent to the dead-letter exchange.
func (m *Metrics) DeadLettered(t *outbox.Table, _, _ string) {
	m.deadLet.WithLabelValues(m.tableName(t)).Inc()
}

// Marked counts one SENT statement and the rows it moved.
func (m *Metrics) Marked(t *outbox.Table, n int64) {
	name := m.tableName(t)
	m.marked.WithLabelValues(name).Add(float64(n))
	m.markStmts.WithLabelValues(name).Inc()
}

// AlreadySent counts published rows that were no longer pending when
// marked (duplicates).
func (m *Metrics) AlreadySent(t *outbox.Table, n int64) {
	m.already.WithLabelValues(m.tableName(t)).Add(float64(n))
}

// ReplaySkipped counts rows read again after a restart that were SENT
// already and not published again.
func (m *Metrics) ReplaySkipped(t *outbox.Table, n int64) {
	m.replaySkip.WithLabelValues(m.tableName(t)).Add(float64(n))
}

// Checkpointed records a saved checkpoint (its position and time feed
// binlog_relay_checkpoint_*).
func (m *Metrics) Checkpointed(cp checkpoint.Checkpoint) {
	m.saves.Inc()
	m.live.setCheckpoint(cp)
}

// SweeperClaims counts rows the sweeper claimed on the primary for a table.
// The sweeper calls it once per claim statement.
func (m *Metrics) SweeperClaims(t *outbox.Table, n int) {
	if n > 0 {
		m.claims.WithLabelValues(m.tableName(t)).Add(float64(n))
	}
}

// SweeperAlreadySent counts rows the sweeper published that someone else
// (the binlog path, mostly) marked before it could: duplicates, counted
// with the binlog path's in binlog_relay_published_already_sent_total.
func (m *Metrics) SweeperAlreadySent(t *outbox.Table, n int) {
	if n > 0 {
		m.already.WithLabelValues(m.tableName(t)).Add(float64(n))
	}
}

// SetBuildInfo sets binlog_relay_build_info{version, go, commit} to 1 (go is
// the running Go release).
func (m *Metrics) SetBuildInfo(version, commit string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, runtime.Version(), commit).Set(1)
}

// HeaderOmitted counts a row published without a header its table maps
// (trace context, CloudEvents) because the row's value did not fit it.
func (m *Metrics) HeaderOmitted(t *outbox.Table, header string) {
	m.headersOmitted.WithLabelValues(m.tableName(t), header).Inc()
}

// TablesMatched sets how many tables a pattern entry matches, and how
// many of them are refused (label sets bounded by the entries, not the
// tables).
func (m *Metrics) TablesMatched(entry string, matched, refused int) {
	m.tablesMatched.WithLabelValues(entry).Set(float64(matched))
	m.tablesRefused.WithLabelValues(entry).Set(float64(refused))
}

// TableChange counts a table of a pattern entry added, dropped or refused
// while streaming.
func (m *Metrics) TableChange(entry, change string) {
	m.tableChanges.WithLabelValues(entry, change).Inc()
}

// ResetBacklog drops the outbox backlog and queue depth gauges: a relay that
// stopped polling them (an HA standby) must not go on exporting the last
// values it read as if they were current.
func (m *Metrics) ResetBacklog() {
	for _, g := range []*prometheus.GaugeVec{m.outboxRows, m.oldestPending, m.retryRatio, m.outboxLastQuery,
		m.queueMessages, m.queueReady, m.queueUnacked, m.queueConsumer} {
		g.Reset()
	}
}

package app

// The wiring: the relay's stages built from the stage Configs (stages.go)
// and the App's connections — the binlog reader, the router, the broker
// lanes (AMQP publishers, or stream lanes: streams.go) and the sweeper
// (sweep.go).

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/lanes"
	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/internal/tablematch"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// wiring builds the relay's stages. Open makes it.
type wiring struct {
	cfg     *config.Config
	stages  stages
	log     *zap.Logger
	source  *source.Source
	primary *sql.DB
	metrics func() *metrics.Metrics
	// degraded: the source replica lags or does not replicate, so the
	// sweeper's pre-checks read the primary (sweep.go).
	degraded func() bool

	headerWarned sync.Map // table and header of a header left out, warned once

	// patterns are the pattern entries under tables: (set by
	// App.ResolveTables): the router routes a table one of them matches
	// later (created while streaming) by the entry's route.
	patterns []*outbox.Table
	matcher  *tablematch.Matcher
	observer binlog.TableObserver
}

// reader is the binlog reader of the source read now.
func (w *wiring) reader(ctx context.Context) (*binlog.Reader, error) {
	cfg := w.cfg
	flavor, err := w.source.Flavor(ctx)
	if err != nil {
		return nil, err
	}
	stls, err := cfg.Source.TLSConfig("source")
	if err != nil {
		return nil, err
	}
	password, tokens, err := source.BinlogPassword(ctx, cfg.Source)
	if err != nil {
		return nil, err
	}
	// Table names are matched as the source compares them: by case under
	// lower_case_table_names=0, where `Outbox` and `outbox` are two tables.
	lctn, err := binlog.DetectLowerCaseTableNames(ctx, w.source.DB())
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	rc := w.stages.reader
	rc.Password, rc.PasswordFunc, rc.TLS, rc.Flavor, rc.LowerCaseTableNames = password, tokens, stls, flavor, lctn
	opts := []binlog.Option{binlog.WithSchemaSource(&binlog.InfoSchema{DB: w.source.DB()}),
		binlog.WithLogger(ops.SlogOf(w.log.Named("binlog"))), binlog.WithFailover(w.source.Failover())}
	if w.matcher != nil && w.matcher.HasPatterns() {
		// Tables the patterns match from here on are read as the stream
		// meets them (pkg/binlog tables.go).
		opts = append(opts, binlog.WithTableMatcher(w.matcher, w.observer))
	}
	return binlog.New(rc, cfg.Tables, opts...)
}

// router builds the router of the binlog path or the sweeper, reporting
// the trace context and CloudEvents headers it leaves out.
func (w *wiring) router() (*router.Router, error) {
	tables := append(append([]*outbox.Table(nil), w.patterns...), w.cfg.Tables...)
	return router.New(tables, router.WithAppID(w.cfg.Name), router.WithHeaderProblem(w.headerOmitted))
}

// headerOmitted counts a mapped header left out of a message and warns once
// per table and header: a producer that writes a bad value writes it on
// every row, and one line says what to fix. The row itself is published.
func (w *wiring) headerOmitted(t *outbox.Table, messageID, header string, err error) {
	w.metrics().HeaderOmitted(t, header)
	if _, seen := w.headerWarned.LoadOrStore(t.FullName()+"\x00"+header, true); seen {
		return
	}
	w.log.Warn("a header the table maps was left out of a message: the row's value does not fit it; the row is published without it (logged once per table and header; binlog_relay_headers_omitted_total counts every one)",
		zap.String("table", t.FullName()), zap.String("header", header), zap.String("message_id", messageID), zap.Error(err))
}

// lanes builds the relay's publishers, one per lane (relay.lanes). With
// several lanes each has its own connection, named after the lane, and
// strict ordering holds per key (publisher.Config.PerKey).
func (w *wiring) lanes() (lanes.Set, error) {
	cfg := w.cfg
	if cfg.Broker.Stream.Enabled() {
		return w.streamLanes() // streams.go
	}
	n := max(cfg.Relay.Lanes, 1)
	strict := cfg.Relay.Ordering == "strict"
	out := make(lanes.Set, n)
	for i := range out {
		name, log := cfg.Name, w.log.Named("publisher")
		if n > 1 {
			name, log = fmt.Sprintf("%s-lane-%d", cfg.Name, i), log.With(zap.Int("lane", i))
		}
		p, err := w.publisher(name, strict, n > 1, log)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// publisher builds a broker publisher (one ordered confirming channel)
// from the broker config.
func (w *wiring) publisher(connName string, strict, perKey bool, log *zap.Logger) (*publisher.Publisher, error) {
	cfg := w.cfg
	btls, err := cfg.Broker.TLSConfig()
	if err != nil {
		return nil, err
	}
	pc := w.stages.publisher
	pc.TLS, pc.ConnectionName, pc.Strict, pc.PerKey = btls, connName, strict, perKey
	return publisher.New(pc, log)
}

// Package reconcile proves delivery end to end: it compares what the outbox
// tables record as sent with what the consumers' inbox tables (pkg/inbox's)
// record as processed, and reports per table and consumer the messages sent
// but never processed, processed more than once, FAILED on either side,
// pending too long, and processed without an outbox row. With Repair it
// puts the rows no consumer processed back to pending, so the sweeper sends
// them again.
//
// Everything is read from replicas (the relay's source for the outbox, a
// replica of each consumer's database for its inbox), in chunks of primary
// key, so memory is bounded by the chunk size whatever the table's size.
// For each chunk of outbox rows the message ids (derived by the router, as
// the relay publishes them) are sorted and merged with the inbox rows
// holding those ids, read through the inbox's unique index. Inbox rows are
// then read in chunks too and looked up in the outbox by message id, for
// the ones no outbox row explains. Only a repair writes, on the primary,
// and only rows still SENT at the version that was read.
//
// Times are the servers' own: each run reads every server's clock once and
// computes its window and grace period from it, so the client's clock and
// time zone do not matter and a long run compares one fixed window.
package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/serverclock"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Reconciler compares one relay's outbox tables with its consumers' inboxes.
type Reconciler struct {
	cfg       config.Reconcile
	relay     string
	tables    []*outbox.Table
	replica   *sql.DB // the outbox's replica (the relay's source)
	primary   *sql.DB // only written by a repair
	consumers []*consumer
	router    *router.Router
	log       *zap.Logger
}

// New builds a Reconciler for cfg's tables and reconcile.consumers (with
// the defaults config.Parse fills; anything else is refused, naming the
// key). inboxes holds one connection pool per consumer, in the config's
// order: replicas of the consumers' databases.
func New(cfg *config.Config, replica, primary *sql.DB, inboxes []*sql.DB, log *zap.Logger) (*Reconciler, error) {
	if err := cfg.Reconcile.Validate(cfg.Tables); err != nil {
		return nil, err
	}
	if len(inboxes) != len(cfg.Reconcile.Consumers) {
		return nil, fmt.Errorf("reconcile: %d inbox connections for %d consumers", len(inboxes), len(cfg.Reconcile.Consumers))
	}
	rt, err := router.New(cfg.Tables, router.WithAppID(cfg.Name))
	if err != nil {
		return nil, err
	}
	r := &Reconciler{cfg: cfg.Reconcile, relay: cfg.Name, tables: cfg.Tables, replica: replica, primary: primary,
		router: rt, log: log}
	for i, cc := range cfg.Reconcile.Consumers {
		c, err := newConsumer(cc, inboxes[i], cfg.Tables)
		if err != nil {
			return nil, fmt.Errorf("reconcile.consumers[%d]: %w", i, err)
		}
		r.consumers = append(r.consumers, c)
	}
	return r, nil
}

// Options narrow one run.
type Options struct {
	// Since and Until bound the outbox rows' creation and the inbox rows'
	// recording. Zero Until is now; zero Since is Until minus
	// reconcile.window.
	Since, Until time.Time
	// Tables are the outbox tables to compare (nil: all).
	Tables []*outbox.Table
	// Repair resets the rows no consumer processed to pending.
	Repair bool
}

// Run compares and returns the report. An error means the run could not
// finish; the report then holds what was found until then.
func (r *Reconciler) Run(ctx context.Context, o Options) (*Report, error) {
	began := time.Now()
	if o.Until.IsZero() {
		o.Until = began
	}
	if o.Since.IsZero() {
		o.Since = o.Until.Add(-r.cfg.Window)
	}
	if o.Tables == nil {
		o.Tables = r.tables
	}
	rep := &Report{Relay: r.relay, StartedAt: began.UTC(), Since: o.Since.UTC(), Until: o.Until.UTC(),
		GracePeriod: r.cfg.GracePeriod.String(), PendingAfter: r.cfg.PendingAfter.String(), Repair: o.Repair,
		Tables: []*TableReport{}, Consumers: []*ConsumerReport{}}
	err := r.run(ctx, o, rep)
	rep.count()
	rep.Seconds = time.Since(began).Seconds()
	if err != nil {
		rep.Error = err.Error()
	}
	return rep, err
}

func (r *Reconciler) run(ctx context.Context, o Options, rep *Report) error {
	if !o.Until.After(o.Since) {
		return fmt.Errorf("reconcile: the window %s .. %s is empty", o.Since.Format(time.RFC3339), o.Until.Format(time.RFC3339))
	}
	clk, err := serverclock.Read(ctx, r.replica)
	if err != nil {
		return fmt.Errorf("reading the outbox replica's clock: %w", err)
	}
	for _, t := range o.Tables {
		tr := &TableReport{Table: t.FullName(), Consumers: []*PairReport{}, pairs: map[string]*PairReport{}}
		rep.Tables = append(rep.Tables, tr)
		if err := r.scanTable(ctx, t, clk, o, tr); err != nil {
			return err
		}
	}
	for _, c := range r.consumers {
		cr := &ConsumerReport{Consumer: c.name}
		rep.Consumers = append(rep.Consumers, cr)
		if err := r.orphans(ctx, c, o, cr); err != nil {
			return err
		}
	}
	return nil
}

// consumersOf lists the consumers that get t's messages.
func (r *Reconciler) consumersOf(t *outbox.Table) []*consumer {
	var out []*consumer
	for _, c := range r.consumers {
		if slices.Contains(c.tables, t) {
			out = append(out, c)
		}
	}
	return out
}

// placeholders is "?, ?, ..." for n arguments.
func placeholders(n int) string {
	if n == 0 {
		return ""
	}
	b := make([]byte, 0, 3*n)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '?')
	}
	return string(b)
}

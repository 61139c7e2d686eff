// Package replay republishes outbox rows that were already sent: a range
// of a table's SENT rows (or of its archive table), read from the source
// replica in chunks by primary key and published again, in primary-key
// order, with the relay's own publisher (confirms, mandatory routing) and
// router (the same message id, properties and headers), to their original
// destinations or to one exchange and routing key.
//
// Invariants:
//   - It reads the replica only; it never writes a row, never changes a
//     status and never needs the primary (nor the relay's lease: it is safe
//     beside a running relay and its HA peers).
//   - Its load is bounded: one chunk (Config.ChunkSize rows) in memory, the
//     publisher's confirm window in flight, and Config.Rate messages a
//     second.
//   - Progress (State.Cursor) only moves over rows the broker confirmed or
//     that failed and were counted, in order, so a run interrupted and
//     resumed sends each row once: an interrupt stops reading and waits for
//     the confirms in flight before saving.
//   - Every message carries HeaderReplay (the replay's id) and
//     HeaderOriginalPublished (when the row was first sent), so a consumer
//     can tell a replay from the original delivery.
package replay

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/serverclock"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Headers every replayed message carries.
const (
	// HeaderReplay marks a replayed message; its value is the replay's id
	// (the relay's name and the start time).
	HeaderReplay = "x-relay-replay"
	// HeaderOriginalPublished is when the row was first sent, RFC 3339: its
	// updated_at (the SENT mark) or, without one, its created_at.
	HeaderOriginalPublished = "x-relay-original-published-at"
)

// Config is one replay.
type Config struct {
	Table *outbox.Table
	// Source is the table read, in Table's schema: Table.Name, or the
	// archive table's name.
	Source string
	Range  Range
	// Exchange and RoutingKey, when set, replace every message's
	// destination (one consumer's queue).
	Exchange, RoutingKey string
	// Rate is messages a second; 0 is unthrottled (the confirm window
	// alone bounds it).
	Rate float64
	// ChunkSize is rows per read on the replica.
	ChunkSize int
	DryRun    bool
	// Samples rows a dry run prints.
	Samples int
	// Resume continues the saved replay instead of starting one.
	Resume bool
	// Name is the relay's name, the first part of the replay's id.
	Name string
	// ProgressEvery is the interval of progress log lines when the output
	// is not a terminal.
	ProgressEvery time.Duration
	// DrainTimeout bounds the wait for confirms in flight after an
	// interrupt.
	DrainTimeout time.Duration
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	c.ChunkSize = cmp.Or(c.ChunkSize, 1000)
	c.Samples = cmp.Or(c.Samples, 5)
	c.ProgressEvery = cmp.Or(c.ProgressEvery, 10*time.Second)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 30*time.Second)
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Table == nil:
		return errors.New("replay: no table")
	case c.Source == "":
		return errors.New("replay: no source table")
	case c.ChunkSize < 1 || c.ChunkSize > 100000:
		return fmt.Errorf("--chunk-size %d is not between 1 and 100000", c.ChunkSize)
	case c.Rate < 0:
		return fmt.Errorf("--rate %g is negative", c.Rate)
	}
	return ident.Check("source table", c.Source)
}

// UsageError is a replay refused before anything was published: a range
// that matches nothing, a table that cannot be replayed, a missing archive,
// nothing to resume. The command exits 2 on it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usage(format string, args ...any) error { return &UsageError{Err: fmt.Errorf(format, args...)} }

// Stream is the publisher: publisher.Stream[Tag]{Publisher: p}.
type Stream interface {
	Run(ctx context.Context, in <-chan publisher.Job[Tag], out chan<- publisher.Result[Tag]) error
}

// Tag names a job's row; End marks the last job of a run.
type Tag struct {
	ID       string
	MsgID    string
	RouteErr error
	End      bool
}

// Observer is told the replay's counts (internal/metrics implements it).
type Observer interface {
	ReplayTotal(table string, total int64)
	ReplayRows(table, outcome string, n int)
	ReplayCursor(table string, done int64)
}

// Summary is what a run did.
type Summary struct {
	ID, Table, Source, Range string
	Destination              string
	Total                    int64 // rows in the range (the whole replay, over resumed runs)
	Published, Failed        int64 // over every run of this replay
	ThisRun                  int64 // rows settled by this run
	FailedIDs                []string
	Elapsed                  time.Duration
	Interrupted              bool
	Cursor                   string
	DryRun                   bool
	Samples                  []Sample
}

// Sample is a row a dry run would send.
type Sample struct {
	ID, MessageID, Exchange, RoutingKey, OriginalPublished string
}

// Replayer runs one replay.
type Replayer struct {
	cfg     Config
	replica *sql.DB
	router  *router.Router
	pub     Stream
	store   Store
	obs     Observer
	out     io.Writer
	term    bool
	log     *zap.Logger

	cols     []string
	datetime []bool
	filter   filter
	st       *State

	settled   atomic.Int64 // this run
	published atomic.Int64
	failed    atomic.Int64
}

// New builds a replayer. pub may be nil for a dry run; obs may be nil.
// Progress goes to out, as a bar when term is true.
func New(cfg Config, replica *sql.DB, rt *router.Router, pub Stream, store Store, obs Observer, out io.Writer, term bool, log *zap.Logger) (*Replayer, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := cfg.Table
	cols := append(t.StreamColumns(), t.Columns.ID)
	for _, c := range []string{t.Columns.CreatedAt, t.Columns.UpdatedAt} {
		if c != "" {
			cols = append(cols, c)
		}
	}
	slices.Sort(cols)
	return &Replayer{cfg: cfg, replica: replica, router: rt, pub: pub, store: store, obs: obs, out: out, term: term,
		log: log, cols: slices.Compact(cols)}, nil
}

func (r *Replayer) source() string {
	return ident.Quote(r.cfg.Table.Schema) + "." + ident.Quote(r.cfg.Source)
}

// idArg binds an id read back from text: a number for an integer key.
func idArg(s string) any {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

// Run replays the range, or the saved replay with Config.Resume. An
// interrupt (ctx ends) stops reading, settles what is in flight, saves the
// progress and returns the summary with ctx's error.
func (r *Replayer) Run(ctx context.Context) (*Summary, error) {
	began := time.Now()
	t := r.cfg.Table
	if err := r.checkSource(ctx); err != nil {
		return nil, err
	}
	clk, err := serverclock.Read(ctx, r.replica)
	if err != nil {
		return nil, fmt.Errorf("reading the replica's clock: %w", err)
	}
	if err := r.loadState(ctx); err != nil {
		return nil, err
	}
	if r.filter, err = buildFilter(t, r.st.Range(), clk); err != nil {
		return nil, &UsageError{Err: err}
	}
	remaining, err := r.count(ctx)
	if err != nil {
		return nil, err
	}
	sum := &Summary{ID: r.st.ID, Table: t.FullName(), Source: t.Schema + "." + r.cfg.Source, Range: r.st.Range().Describe(),
		Destination: r.destination(), DryRun: r.cfg.DryRun}
	if !r.cfg.Resume {
		r.st.Total = remaining
		if remaining == 0 {
			return nil, usage("no row of %s matches: %s (replay sends only SENT rows; is the range right? FAILED rows are requeue's, PENDING ones the relay's)", sum.Source, sum.Range)
		}
	}
	if r.cfg.DryRun {
		sum.Total = remaining
		sum.Samples, err = r.samples(ctx)
		return sum, err
	}
	if err := r.store.Save(ctx, r.st); err != nil {
		return nil, err
	}
	if r.obs != nil {
		r.obs.ReplayTotal(t.FullName(), r.st.Total)
	}
	r.published.Store(r.st.Published)
	r.failed.Store(r.st.Failed)
	r.log.Info("replay starting", zap.String("replay", r.st.ID), zap.String("table", t.FullName()), zap.String("source", sum.Source),
		zap.String("range", sum.Range), zap.String("destination", sum.Destination), zap.Int64("rows", remaining),
		zap.Float64("rate", r.cfg.Rate), zap.Int("chunk_size", r.cfg.ChunkSize), zap.Bool("resume", r.cfg.Resume))
	stopProgress := r.showProgress(began)
	failedIDs, runErr := r.pipeline(ctx)
	stopProgress()
	sum.Total, sum.Published, sum.Failed = r.st.Total, r.published.Load(), r.failed.Load()
	sum.ThisRun, sum.FailedIDs, sum.Cursor, sum.Elapsed = r.settled.Load(), failedIDs, r.st.Cursor, time.Since(began)
	interrupted := ctx.Err() != nil
	// Saved on a context of its own: the run's may be the one that ended.
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch {
	case runErr == nil && !interrupted:
		if err := r.store.Delete(saveCtx); err != nil {
			r.log.Warn("the replay finished but its progress could not be removed", zap.Error(err))
		}
		return sum, nil
	case interrupted && (runErr == nil || errors.Is(runErr, context.Canceled)):
		sum.Interrupted = true
		runErr = ctx.Err()
	}
	if err := r.save(saveCtx); err != nil {
		return sum, errors.Join(runErr, err)
	}
	return sum, runErr
}

func (r *Replayer) destination() string {
	switch {
	case r.st.Exchange != "" && r.st.RoutingKey != "":
		return fmt.Sprintf("exchange %s, routing key %s", r.st.Exchange, r.st.RoutingKey)
	case r.st.Exchange != "":
		return fmt.Sprintf("exchange %s, original routing keys", r.st.Exchange)
	case r.st.RoutingKey != "":
		return fmt.Sprintf("original exchanges, routing key %s", r.st.RoutingKey)
	}
	return "original exchanges and routing keys"
}

// checkSource makes sure the table read exists (the archive may not).
func (r *Replayer) checkSource(ctx context.Context) error {
	var n int
	err := r.replica.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		r.cfg.Table.Schema, r.cfg.Source).Scan(&n)
	if err != nil {
		return fmt.Errorf("looking for %s.%s on the replica: %w", r.cfg.Table.Schema, r.cfg.Source, err)
	}
	if n > 0 {
		return nil
	}
	if r.cfg.Source != r.cfg.Table.Name {
		return usage("the archive table %s.%s does not exist on the replica (sweeper.archive.table names it; default {table}_archive)", r.cfg.Table.Schema, r.cfg.Source)
	}
	return usage("the table %s does not exist on the replica", r.cfg.Table.FullName())
}

// loadState starts a replay's state, or loads the saved one to resume.
func (r *Replayer) loadState(ctx context.Context) error {
	t := r.cfg.Table
	saved, err := r.store.Load(ctx)
	switch {
	case err != nil && !errors.Is(err, ErrNoProgress):
		return err
	case r.cfg.Resume && saved == nil:
		return usage("nothing to resume: no interrupted replay of %s is saved (it finished, or never started)", t.FullName())
	case r.cfg.Resume:
		if saved.Source != t.Schema+"."+r.cfg.Source {
			return usage("the saved replay reads %s, not %s: resume it with the same --archive choice", saved.Source, t.Schema+"."+r.cfg.Source)
		}
		r.st = saved
		return nil
	case saved != nil && !r.cfg.DryRun:
		r.log.Warn("an interrupted replay of this table was saved; starting a new one replaces it (use --resume to continue it)",
			zap.String("table", t.FullName()), zap.String("replay", saved.ID), zap.String("cursor", saved.Cursor))
	}
	r.st = &State{ID: fmt.Sprintf("%s-replay-%s", r.cfg.Name, time.Now().UTC().Format("20060102T150405Z")), Table: t.FullName(),
		Source: t.Schema + "." + r.cfg.Source, Since: r.cfg.Range.Since, Until: r.cfg.Range.Until, IDs: r.cfg.Range.IDs,
		Where: r.cfg.Range.Where, Exchange: r.cfg.Exchange, RoutingKey: r.cfg.RoutingKey, Started: time.Now().UTC()}
	return nil
}

// bounds is the filter plus the key bounds: past after (the cursor, or the
// last row the feeder read), up to MaxID.
func (r *Replayer) bounds(after string) (string, []any) {
	id := ident.Quote(r.cfg.Table.Columns.ID)
	cond, args := r.filter.cond, slices.Clone(r.filter.args)
	if after != "" {
		cond += " AND " + id + " > ?"
		args = append(args, idArg(after))
	}
	if r.st.MaxID != "" {
		cond += " AND " + id + " <= ?"
		args = append(args, idArg(r.st.MaxID))
	}
	return cond, args
}

// count counts the rows left, fixing MaxID on a new replay so rows sent
// after it started stay out of it.
func (r *Replayer) count(ctx context.Context) (int64, error) {
	cond, args := r.bounds(r.st.Cursor)
	var n int64
	var maxID sql.NullString
	q := fmt.Sprintf("SELECT COUNT(*), MAX(%s) FROM %s WHERE %s", ident.Quote(r.cfg.Table.Columns.ID), r.source(), cond)
	if err := r.replica.QueryRowContext(ctx, q, args...).Scan(&n, &maxID); err != nil {
		return 0, fmt.Errorf("counting the rows to replay on the replica: %w", err)
	}
	if r.st.MaxID == "" {
		r.st.MaxID = maxID.String
	}
	return n, nil
}

// chunk reads up to n rows past after, in id order. The feeder passes the
// last id it read, which runs ahead of the confirmed cursor (State.Cursor,
// the collector's).
func (r *Replayer) chunk(ctx context.Context, after string, n int) ([]*outbox.Row, error) {
	cond, args := r.bounds(after)
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT ?", quoteAll(r.cols), r.source(), cond, ident.Quote(r.cfg.Table.Columns.ID))
	rs, err := r.replica.QueryContext(ctx, q, append(args, n)...)
	if err != nil {
		return nil, fmt.Errorf("reading rows of %s on the replica: %w", r.source(), err)
	}
	defer rs.Close()
	if r.datetime == nil {
		types, err := rs.ColumnTypes()
		if err != nil {
			return nil, err
		}
		r.datetime = make([]bool, len(types))
		for i, ct := range types {
			r.datetime[i] = ct.DatabaseTypeName() == "DATETIME"
		}
	}
	var out []*outbox.Row
	vals := make([]any, len(r.cols))
	ptrs := make([]any, len(r.cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rs.Next() {
		if err := rs.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("reading rows of %s: %w", r.source(), err)
		}
		out = append(out, outboxsql.RowFromSQL(r.cfg.Table, r.cols, slices.Clone(vals), r.datetime))
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("reading rows of %s: %w", r.source(), err)
	}
	return out, nil
}

func quoteAll(cols []string) string {
	s := ""
	for i, c := range cols {
		if i > 0 {
			s += ", "
		}
		s += ident.Quote(c)
	}
	return s
}

// originalPublished is when the row was first sent: its updated_at (the
// SENT mark) or created_at.
func (r *Replayer) originalPublished(row *outbox.Row) string {
	t := r.cfg.Table
	if c := t.Columns.UpdatedAt; c != "" && row.Values[c] != nil {
		return colval.ValueStringIn(row.Values[c], t.Location())
	}
	c := t.Columns.CreatedAt
	if c == "" || row.Values[c] == nil {
		return ""
	}
	v := row.Values[c]
	if t.CreatedAtEpoch != "" {
		n, err := strconv.ParseInt(colval.ValueString(v), 10, 64)
		if err != nil {
			return ""
		}
		if t.CreatedAtEpoch == "s" {
			n *= 1000
		}
		return time.UnixMilli(n).In(t.Location()).Format(time.RFC3339Nano)
	}
	return colval.ValueStringIn(v, t.Location())
}

// route builds the replayed message of a row.
func (r *Replayer) route(row *outbox.Row) (*router.Message, error) {
	msg, err := r.router.Route(row)
	if err != nil {
		return nil, err
	}
	if r.st.Exchange != "" {
		msg.Exchange = r.st.Exchange
	}
	if r.st.RoutingKey != "" {
		msg.RoutingKey = r.st.RoutingKey
	}
	if msg.Publishing.Headers == nil {
		msg.Publishing.Headers = map[string]any{}
	}
	msg.Publishing.Headers[HeaderReplay] = r.st.ID
	if at := r.originalPublished(row); at != "" {
		msg.Publishing.Headers[HeaderOriginalPublished] = at
	}
	return msg, nil
}

func (r *Replayer) save(ctx context.Context) error {
	r.st.Published, r.st.Failed, r.st.Saved = r.published.Load(), r.failed.Load(), time.Now().UTC()
	return r.store.Save(ctx, r.st)
}

// samples reads the first rows a dry run would send.
func (r *Replayer) samples(ctx context.Context) ([]Sample, error) {
	rows, err := r.chunk(ctx, r.st.Cursor, r.cfg.Samples)
	if err != nil {
		return nil, err
	}
	var out []Sample
	for _, row := range rows {
		s := Sample{ID: colval.ValueString(row.ID), OriginalPublished: r.originalPublished(row)}
		if msg, err := r.route(row); err != nil {
			s.Exchange = "(cannot be routed: " + err.Error() + ")"
		} else {
			s.MessageID, s.Exchange, s.RoutingKey = msg.Publishing.MessageId, msg.Exchange, msg.RoutingKey
		}
		out = append(out, s)
	}
	return out, nil
}

package command

// The replay command: republish a range of SENT rows (or archived ones)
// read from the source replica, with the relay's router and publisher. It
// never uses the primary nor the lease (internal/replay).

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/replay"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// ReplayOptions are `binlog-relay replay`'s flags.
type ReplayOptions struct {
	Table      string
	Range      replay.Range
	Archive    bool
	Exchange   string
	RoutingKey string
	Rate       float64
	ChunkSize  int
	DryRun     bool
	Samples    int
	Resume     bool
	// ProgressEvery is the interval of progress log lines off a terminal.
	ProgressEvery time.Duration
	// MetricsAddr serves /metrics while the replay runs ("": off).
	MetricsAddr string

	rangeSet bool // a range or destination flag was given (refused with --resume)
}

// Flags registers replay's flags on fs.
func (o *ReplayOptions) Flags(fs *flag.FlagSet) {
	now := time.Now()
	set := func(f func(string) error) func(string) error {
		return func(s string) error { o.rangeSet = true; return f(s) }
	}
	fs.StringVar(&o.Table, "table", "", "schema.table to replay (needed when several tables are configured)")
	fs.Func("since", "rows created at or after this time: RFC 3339 or a duration back from now (2h)", set(func(s string) error {
		t, err := ParseSince(s, now)
		o.Range.Since = t
		return err
	}))
	fs.Func("until", "rows created before this time: RFC 3339 or a duration back from now", set(func(s string) error {
		t, err := ParseSince(s, now)
		o.Range.Until = t
		return err
	}))
	fs.Func("ids", "rows whose primary key is in A-B (inclusive)", set(func(s string) error {
		r, err := replay.ParseIDs(s)
		o.Range.IDs = &r
		return err
	}))
	fs.Func("where", "field=value or field!=value over a mapped field (routing_key, exchange, message_id, or a mapped column such as aggregatetype); repeatable, all must hold", set(func(s string) error {
		c, err := replay.ParseWhere(s)
		o.Range.Where = append(o.Range.Where, c)
		return err
	}))
	fs.BoolVar(&o.Archive, "archive", false, "read the archive table (sweeper.archive.table, default {table}_archive) instead of the live one")
	fs.Func("exchange", "publish every message to this exchange instead of its own", set(func(s string) error { o.Exchange = s; return nil }))
	fs.Func("routing-key", "publish every message with this routing key instead of its own", set(func(s string) error { o.RoutingKey = s; return nil }))
	o.Rate = 1000
	fs.Func("rate", "messages a second, N or N/s (also N/m, N/h); 0 for unthrottled (default 1000/s)", func(s string) error {
		r, err := replay.ParseRate(s)
		o.Rate = r
		return err
	})
	fs.IntVar(&o.ChunkSize, "chunk-size", 1000, "rows per read on the replica")
	fs.BoolVar(&o.DryRun, "dry-run", false, "count the rows and print samples; publish nothing")
	fs.IntVar(&o.Samples, "samples", 5, "rows --dry-run prints")
	fs.BoolVar(&o.Resume, "resume", false, "continue the interrupted replay of the table (saved in Redis), with its range and destination")
	fs.DurationVar(&o.ProgressEvery, "progress-interval", 10*time.Second, "interval of progress log lines when stderr is not a terminal")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve /metrics on this address while replaying (e.g. :9101); off by default")
}

// Validate checks the flags before anything connects.
func (o *ReplayOptions) Validate() error {
	r := o.Range
	switch {
	case o.Resume && o.rangeSet:
		return errors.New("replay: --resume continues the saved replay with its own range and destination; drop --since, --until, --ids, --where, --exchange and --routing-key (or start a new replay without --resume)")
	case !r.Since.IsZero() && !r.Until.IsZero() && !r.Until.After(r.Since):
		return errors.New("replay: --until must be after --since")
	case o.ChunkSize < 1 || o.ChunkSize > 100000:
		return fmt.Errorf("replay: --chunk-size %d is not between 1 and 100000", o.ChunkSize)
	case o.Samples < 1:
		return errors.New("replay: --samples must be positive")
	case o.ProgressEvery <= 0:
		return errors.New("replay: --progress-interval must be positive")
	}
	return nil
}

// Replay runs `binlog-relay replay`: the summary goes to w, progress to
// progress (a bar when it is a terminal). A *replay.UsageError is a replay
// refused before anything was published.
func Replay(ctx context.Context, e Env, o ReplayOptions, w, progress io.Writer) (*replay.Summary, error) {
	if err := o.Validate(); err != nil {
		return nil, &replay.UsageError{Err: err}
	}
	t, err := e.replayTable(o.Table)
	if err != nil {
		return nil, &replay.UsageError{Err: err}
	}
	src := t.Name
	if o.Archive {
		src = sweeper.ArchiveTableName(cmp.Or(e.Cfg.Sweeper.Archive.Table, "{table}_archive"), t.Name)
	}
	if err := e.Source.DB().PingContext(ctx); err != nil {
		return nil, fmt.Errorf("source %s: %w", e.Source.Current().Redacted(), err)
	}
	rt, err := e.NewRouter()
	if err != nil {
		return nil, err
	}
	var pub replay.Stream
	if !o.DryRun {
		p, err := e.NewPublisher(e.Cfg.Name+"-replay", e.Log.Named("replay.publisher"))
		if err != nil {
			return nil, err
		}
		pub = publisher.Stream[replay.Tag]{Publisher: p}
	}
	m := metrics.NewReplay(e.Cfg.Name)
	if o.MetricsAddr != "" && !o.DryRun {
		stop, err := serveReplayMetrics(o.MetricsAddr, m, e.Log)
		if err != nil {
			return nil, &replay.UsageError{Err: err}
		}
		defer stop()
	}
	key := e.replayKey(t, o.Archive)
	term := isTerminal(progress)
	r, err := replay.New(replay.Config{Table: t, Source: src, Range: o.Range, Exchange: o.Exchange, RoutingKey: o.RoutingKey,
		Rate: o.Rate, ChunkSize: o.ChunkSize, DryRun: o.DryRun, Samples: o.Samples, Resume: o.Resume, Name: e.Cfg.Name,
		ProgressEvery: o.ProgressEvery}, e.Source.DB(), rt, pub, replay.NewRedisStore(e.Redis, key), m, progress, term, e.Log.Named("replay"))
	if err != nil {
		return nil, &replay.UsageError{Err: err}
	}
	sum, err := r.Run(ctx)
	if sum != nil {
		printSummary(w, sum, key)
	}
	return sum, err
}

// replayKey is where a table's replay progress is saved, beside the
// relay's other keys (binlog-relay:NAME:checkpoint, :instance): one replay
// per table and source at a time.
func (e Env) replayKey(t *outbox.Table, archive bool) string {
	k := e.Cfg.RedisKeys().Replay(t.FullName())
	if archive {
		k += ":archive"
	}
	return k
}

// replayTable picks the table: the one named, or the only one configured.
func (e Env) replayTable(name string) (*outbox.Table, error) {
	var names []string
	for _, t := range e.Cfg.Tables {
		names = append(names, t.FullName())
	}
	match := config.MatchTables(e.Cfg.Tables, name)
	switch {
	case name == "" && len(e.Cfg.Tables) == 1:
		return e.Cfg.Tables[0], nil
	case name == "":
		return nil, fmt.Errorf("replay: several tables are configured; name one with --table (%s)", strings.Join(names, ", "))
	case len(match) == 0:
		return nil, fmt.Errorf("replay: --table %s is not configured (%s)", name, strings.Join(names, ", "))
	case len(match) > 1:
		return nil, fmt.Errorf("replay: --table %s is ambiguous; use schema.table", name)
	}
	return match[0], nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// serveReplayMetrics serves the replay's metrics until stop.
func serveReplayMetrics(addr string, m *metrics.Replay, log *zap.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: listening on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("replay metrics served", zap.String("addr", ln.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// printSummary writes what the run did, for people.
func printSummary(w io.Writer, s *replay.Summary, key string) {
	if s.DryRun {
		fmt.Fprintf(w, "dry run: %d rows of %s would be replayed (%s) to %s\n", s.Total, s.Source, s.Range, s.Destination)
		for _, x := range s.Samples {
			fmt.Fprintf(w, "  id %s  message_id %s  exchange %s  routing_key %s  first sent %s\n", x.ID, x.MessageID, x.Exchange, x.RoutingKey, x.OriginalPublished)
		}
		return
	}
	rate := 0.0
	if secs := s.Elapsed.Seconds(); secs > 0 {
		rate = float64(s.ThisRun) / secs
	}
	state := "done"
	if s.Interrupted {
		state = "interrupted"
	}
	fmt.Fprintf(w, "replay %s %s: %s, %s, to %s\n", s.ID, state, s.Source, s.Range, s.Destination)
	fmt.Fprintf(w, "  published %d, failed %d, of %d rows; this run %d rows in %s (%.0f rows/s); last id %s\n",
		s.Published, s.Failed, s.Total, s.ThisRun, s.Elapsed.Round(time.Millisecond), rate, s.Cursor)
	if s.Failed > 0 {
		fmt.Fprintf(w, "  failed ids (first %d): %s; replay them with --ids once the cause is fixed\n", len(s.FailedIDs), strings.Join(s.FailedIDs, ", "))
	}
	if s.Interrupted {
		fmt.Fprintf(w, "  progress saved under %s: continue with --resume\n", key)
	}
}

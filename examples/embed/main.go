// Command embed streams one outbox table with binlog-relay's public packages
// and prints each message as a JSON line instead of publishing it: the
// skeleton of a relay with its own sink.
//
//   - pkg/outbox describes the table (here the Debezium outbox layout);
//   - pkg/binlog reads its inserts from a replica's binlog, with a marker at
//     the end of every transaction;
//   - pkg/router turns each row into the AMQP message the relay would
//     publish (exchange, routing key, message id, headers, body);
//   - pkg/checkpoint keeps the position in Redis after each transaction's
//     messages are written, so a restart goes on where it stopped.
//
// Run it against the stack (make stack-up):
//
//	go run ./examples/embed -source 'root:@tcp(127.0.0.1:3308)/' -table app.outbox
//
// and insert rows into app.outbox on the primary (127.0.0.1:3307).
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// options are the program's flags.
type options struct {
	Source   string // the replica, as a Go MySQL driver DSN
	Table    string // schema.table
	Preset   string // the table's layout (outbox.Preset)
	Redis    string
	Key      string // the checkpoint's Redis key
	ServerID uint
	Max      int // stop after this many messages (0: until SIGINT or SIGTERM)
}

// line is what the program prints for each message.
type line struct {
	Exchange   string            `json:"exchange"`
	RoutingKey string            `json:"routing_key"`
	MessageID  string            `json:"message_id"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       string            `json:"body"`
}

func main() {
	var o options
	flag.StringVar(&o.Source, "source", "root:@tcp(127.0.0.1:3308)/", "the replica to stream from (Go MySQL driver DSN; the user needs REPLICATION SLAVE and REPLICATION CLIENT)")
	flag.StringVar(&o.Table, "table", "app.outbox", "the outbox table, schema.table")
	flag.StringVar(&o.Preset, "preset", "debezium", "the table's layout: "+strings.Join(outbox.PresetNames(), ", "))
	flag.StringVar(&o.Redis, "redis", "127.0.0.1:6379", "the Redis that keeps the checkpoint")
	flag.StringVar(&o.Key, "key", "", "the checkpoint's Redis key (default embed:{schema.table}:checkpoint)")
	flag.UintVar(&o.ServerID, "server-id", 0, "the replica server_id to connect with (default: random)")
	flag.IntVar(&o.Max, "max", 0, "stop after this many messages, at the end of a transaction (0: run until interrupted)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, o, os.Stdout, log); err != nil {
		log.Error("embed stopped", "error", err)
		os.Exit(1)
	}
}

// run streams until ctx ends or o.Max messages are out, and returns how it
// ended. Each transaction's messages are written to out before its end is
// checkpointed: a crash in between prints them again (at least once), and
// nothing is ever skipped.
func run(ctx context.Context, o options, out io.Writer, log *slog.Logger) error {
	table, err := tableOf(o)
	if err != nil {
		return err
	}
	cfg, err := sourceConfig(o)
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", o.Source)
	if err != nil {
		return err
	}
	defer db.Close()
	if cfg.Flavor, err = binlog.DetectFlavor(ctx, db); err != nil {
		return err
	}

	rc := redis.NewClient(&redis.Options{Addr: o.Redis})
	defer rc.Close()
	store := checkpoint.NewRedis(rc, checkpointKey(o, table))
	start, err := startPosition(ctx, store, db, cfg.Flavor)
	if err != nil {
		return err
	}
	log.Info("streaming", "table", table.FullName(), "from", start.String())

	reader, err := binlog.New(cfg, []*outbox.Table{table}, binlog.WithLogger(log), binlog.WithSchemaSource(&binlog.InfoSchema{DB: db}))
	if err != nil {
		return err
	}
	rt, err := router.New([]*outbox.Table{table}, router.WithAppID("embed"))
	if err != nil {
		return err
	}
	tracker, err := binlog.NewTracker(start)
	if err != nil {
		return err
	}
	s := &sink{router: rt, tracker: tracker, store: store, enc: json.NewEncoder(out), log: log}
	return stream(ctx, reader, start, s, o.Max)
}

// stream runs the reader from start and hands its events to s until ctx
// ends, the reader stops with an error, or limit messages are out (0: no
// limit).
func stream(ctx context.Context, reader *binlog.Reader, start binlog.Position, s *sink, limit int) error {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan binlog.Event, 256)
	done := make(chan error, 1)
	go func() { done <- reader.Run(streamCtx, start, events) }()

	stopping := false
	for {
		select {
		case err := <-done:
			// Run ends on a transaction boundary when ctx ends, or with an
			// error it cannot retry (a purged position, a server_id
			// conflict): the checkpoint then still names the last whole
			// transaction written out.
			if errors.Is(err, context.Canceled) {
				err = nil
			}
			return err
		case ev := <-events:
			if stopping {
				continue // read past -max: neither written nor checkpointed
			}
			switch ev.Kind {
			case binlog.KindRow:
				if err := s.row(ev.Row); err != nil {
					return err
				}
			case binlog.KindCommit:
				if err := s.commit(ctx, ev.Commit); err != nil {
					return err
				}
				if limit > 0 && s.sent >= limit {
					stopping = true
					cancel() // Run returns once its open transaction is read
				}
			}
		}
	}
}

// sink is where the messages go: each routed row is printed as a JSON
// line, and each transaction's end is checkpointed after its lines.
type sink struct {
	router  *router.Router
	tracker *binlog.Tracker
	store   checkpoint.Store
	enc     *json.Encoder
	log     *slog.Logger
	sent    int // messages printed
}

// row prints the message of one row.
func (s *sink) row(r *outbox.Row) error {
	msg, err := s.router.Route(r)
	if err != nil {
		// A real sink would record the row as failed; this one says which
		// and goes on.
		s.log.Warn("row not routed", "id", r.ID, "error", err)
		return nil
	}
	if err := s.enc.Encode(lineOf(msg)); err != nil {
		return err
	}
	s.sent++
	return nil
}

// commit checkpoints the end of a transaction whose lines are all printed.
func (s *sink) commit(ctx context.Context, c binlog.Commit) error {
	if err := s.tracker.Apply(c); err != nil {
		return err
	}
	return s.store.Save(ctx, checkpoint.FromPosition(s.tracker.Position(), "", time.Now()))
}

// sourceConfig is the reader's Config for the replica -source names, all
// but the flavour, which the server itself is asked for.
func sourceConfig(o options) (binlog.Config, error) {
	dsn, err := mysql.ParseDSN(o.Source)
	if err != nil {
		return binlog.Config{}, fmt.Errorf("-source: %w", err)
	}
	host, portText, err := net.SplitHostPort(dsn.Addr)
	if err != nil {
		return binlog.Config{}, fmt.Errorf("-source: address %q: %w", dsn.Addr, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return binlog.Config{}, fmt.Errorf("-source: address %q has no port number", dsn.Addr)
	}
	return binlog.Config{Host: host, Port: uint16(port), User: dsn.User, Password: dsn.Passwd, ServerID: uint32(o.ServerID)}, nil
}

// checkpointKey is the Redis key of the checkpoint: -key, or one named
// after the table.
func checkpointKey(o options, table *outbox.Table) string {
	if o.Key != "" {
		return o.Key
	}
	return "embed:{" + table.FullName() + "}:checkpoint"
}

// tableOf is the outbox table the flags describe, validated.
func tableOf(o options) (*outbox.Table, error) {
	t, err := outbox.Preset(o.Preset)
	if err != nil {
		return nil, fmt.Errorf("-preset: %w", err)
	}
	schema, name, ok := strings.Cut(o.Table, ".")
	if !ok {
		return nil, fmt.Errorf("-table: %q is not schema.table", o.Table)
	}
	t.Schema, t.Name = schema, name
	if err := t.Validate("-table " + o.Table); err != nil {
		return nil, err
	}
	return &t, nil
}

// startPosition is the saved checkpoint or, the first time, the end of the
// source's binlog now (rows committed before that are not streamed).
func startPosition(ctx context.Context, store checkpoint.Store, db *sql.DB, flavor string) (binlog.Position, error) {
	cp, err := store.Load(ctx)
	switch {
	case err == nil:
		return cp.Position(), nil
	case errors.Is(err, checkpoint.ErrNotFound):
		return binlog.CurrentPosition(ctx, db, flavor)
	default:
		return binlog.Position{}, err
	}
}

// lineOf renders a routed message.
func lineOf(m *router.Message) line {
	l := line{Exchange: m.Exchange, RoutingKey: m.RoutingKey, MessageID: m.Publishing.MessageId, Body: string(m.Publishing.Body),
		Headers: make(map[string]string, len(m.Publishing.Headers))}
	for k, v := range m.Publishing.Headers {
		l.Headers[k] = fmt.Sprint(v)
	}
	return l
}

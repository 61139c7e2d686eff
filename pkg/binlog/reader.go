package binlog

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/sourceinfo"
	"github.com/binlog-relay/binlog-relay/internal/tablerename"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Config is the replica the reader streams from.
type Config struct {
	Host     string
	Port     uint16
	User     string
	Password string
	// PasswordFunc, when set, is asked for the password before each
	// connection instead of using Password, for credentials that expire,
	// such as RDS IAM tokens (15 minutes). addr is the server dialled,
	// host:port. An error fails that connection, which is retried like any
	// other; the password is never logged.
	PasswordFunc PasswordFunc
	TLS          *tls.Config
	// ServerID identifies the relay to the source as a replica; it must be
	// unique among the source's replicas. Zero picks a random one.
	ServerID uint32
	// Flavor is FlavorMySQL or FlavorMariaDB (detected by the caller).
	Flavor string
	// Heartbeat asks the source for heartbeat events when idle, so lag stays
	// true with no traffic.
	Heartbeat time.Duration
	// ReconnectMin and ReconnectMax bound the backoff between reconnects.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// StopTimeout bounds how long a stop waits for the open transaction to
	// end, so a stop lands on a transaction boundary.
	StopTimeout time.Duration
	// FailoverAfter is how many connections in a row must fail without
	// reading an event before a reader built WithFailover picks another
	// server (default 3).
	FailoverAfter int
	// XABufferRows and XABufferBytes bound the rows of prepared XA
	// transactions held until their XA COMMIT (all prepared branches
	// together). Past either bound the reader stops with an error naming
	// the XA transaction rather than publish rows that may be rolled back.
	XABufferRows  int
	XABufferBytes int64
	// TxBufferRows and TxBufferBytes bound the rows of one transaction held
	// until its commit, so that its later UPDATEs and DELETEs of them apply
	// first (a row is emitted as its transaction committed it). Past either
	// bound the rows held so far are sent (default 5,000 rows, 8 MiB).
	TxBufferRows  int
	TxBufferBytes int64
	// LowerCaseTableNames is the source's lower_case_table_names
	// (DetectLowerCaseTableNames reads it): 0, the default on Linux,
	// tells schema and table names apart by case (`Outbox` and `outbox`
	// are two tables, and only the one configured is read); 1 and 2
	// compare them without case (names.go).
	LowerCaseTableNames int
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	c.ServerID = cmp.Or(c.ServerID, 100000+rand.Uint32N(1<<30))
	c.Heartbeat = cmp.Or(c.Heartbeat, time.Second)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, 200*time.Millisecond)
	c.ReconnectMax = cmp.Or(c.ReconnectMax, 10*time.Second)
	c.StopTimeout = cmp.Or(c.StopTimeout, 10*time.Second)
	c.FailoverAfter = cmp.Or(c.FailoverAfter, 3)
	c.XABufferRows = cmp.Or(c.XABufferRows, 100_000)
	c.XABufferBytes = cmp.Or(c.XABufferBytes, 64<<20)
	c.TxBufferRows = cmp.Or(c.TxBufferRows, 5_000)
	c.TxBufferBytes = cmp.Or(c.TxBufferBytes, 8<<20)
}

// Validate reports every bad field, by its name in Config; it expects
// Defaults to have filled the zero ones.
func (c *Config) Validate() error {
	var errs []error
	if c.Host == "" {
		errs = append(errs, errors.New("binlog: Config.Host: required"))
	}
	if c.Port == 0 {
		errs = append(errs, errors.New("binlog: Config.Port: required"))
	}
	if c.User == "" {
		errs = append(errs, errors.New("binlog: Config.User: required"))
	}
	if c.Password != "" && c.PasswordFunc != nil {
		errs = append(errs, errors.New("binlog: Config.PasswordFunc: set Password or PasswordFunc, not both"))
	}
	if c.Flavor != FlavorMySQL && c.Flavor != FlavorMariaDB {
		errs = append(errs, fmt.Errorf("binlog: Config.Flavor: %q is neither %q nor %q", c.Flavor, FlavorMySQL, FlavorMariaDB))
	}
	if c.XABufferRows < 1 {
		errs = append(errs, fmt.Errorf("binlog: Config.XABufferRows: %d must be positive", c.XABufferRows))
	}
	if c.XABufferBytes < 1 {
		errs = append(errs, fmt.Errorf("binlog: Config.XABufferBytes: %d must be positive", c.XABufferBytes))
	}
	if c.TxBufferRows < 1 {
		errs = append(errs, fmt.Errorf("binlog: Config.TxBufferRows: %d must be positive", c.TxBufferRows))
	}
	if c.TxBufferBytes < 1 {
		errs = append(errs, fmt.Errorf("binlog: Config.TxBufferBytes: %d must be positive", c.TxBufferBytes))
	}
	if c.LowerCaseTableNames < 0 || c.LowerCaseTableNames > 2 {
		errs = append(errs, fmt.Errorf("binlog: Config.LowerCaseTableNames: %d is not 0, 1 or 2", c.LowerCaseTableNames))
	}
	return errors.Join(errs...)
}

// PasswordFunc returns the password for a new connection to addr
// (host:port); see Config.PasswordFunc.
type PasswordFunc func(ctx context.Context, addr string) (string, error)

// FailoverFunc picks the server to stream from: before the first
// connection (failed is "") and after Config.FailoverAfter connections in a
// row failed without reading an event (failed is that server's host:port).
// It returns once the chosen server can serve pos (it may wait for a
// lagging replica); an error stops the reader.
type FailoverFunc func(ctx context.Context, pos Position, failed string) (host string, port uint16, err error)

// An Option configures a Reader.
type Option func(*Reader)

// WithLogger has the reader log connections, reconnects and failovers to l
// (by default it logs nothing).
func WithLogger(l *slog.Logger) Option { return func(r *Reader) { r.log = l } }

// WithSchemaSource gives the reader the tables' columns when the source does
// not send column names with each row (binlog_row_metadata=MINIMAL). Without
// one, such a source stops the reader with an error saying so; InfoSchema
// reads them from the source's information_schema.
func WithSchemaSource(s SchemaSource) Option { return func(r *Reader) { r.schemas = s } }

// WithFailover has the reader choose its server with f instead of always
// streaming from Config.Host and Config.Port.
func WithFailover(f FailoverFunc) Option { return func(r *Reader) { r.failoverFn = f } }

// Kind tells what an Event carries.
type Kind uint8

const (
	// KindRow is an outbox row to publish, as its transaction committed it:
	// inserted, or put back to a publishable status.
	KindRow Kind = iota + 1
	// KindCommit ends a transaction: every row of it came before.
	KindCommit
	// KindRename: an outbox table was renamed; the rows sent before now
	// live under Event.Rename's name. It comes before its statement's
	// commit.
	KindRename
)

// Event is what the reader emits, in binlog order.
type Event struct {
	Kind   Kind
	Row    *outbox.Row
	Commit Commit
	Rename *Rename
}

// Commit is the end of one transaction on the source.
type Commit struct {
	GTID TxGTID
	File string
	Pos  uint32
	// Time is the event timestamp (seconds) of the commit.
	Time uint32
	// OpenXA: after this transaction a prepared XA branch with outbox rows
	// still waits for its XA COMMIT. Its rows live only in the reader's
	// memory, so the position after this transaction is not one to resume
	// from: a restart there would never read them again. The checkpoint
	// stays before the oldest such prepare.
	OpenXA bool
}

// Reader streams one source. Run blocks; Lag may be read from any goroutine.
type Reader struct {
	cfg Config
	// tablesMu guards the tables: those given to New, and those the
	// matcher matched since (tables.go), which the parser goroutine and
	// the stream both meet.
	tablesMu   sync.RWMutex
	tables     map[tableID]*outbox.Table // as the source tells tables apart (names.go); nil: no outbox table
	tableList  []*outbox.Table           // in the order met (New's first), for the rename tracker; append only
	tableIndex map[*outbox.Table]int
	matcher    TableMatcher
	observer   TableObserver
	added      map[tableID]bool  // matched, not yet announced to the observer
	refused    map[tableID]error // matched tables whose rows are skipped
	refusedErr map[tableID]error // matched by two entries, not yet announced
	schemas    SchemaSource
	log        *slog.Logger
	failoverFn FailoverFunc

	layoutMu sync.Mutex
	layouts  map[tableID]*layout // replaced per TABLE_MAP

	lastEventTime atomic.Int64 // unix seconds of the last event's header
	lastRecvTime  atomic.Int64 // unix nanos when that event or a heartbeat arrived
	connected     atomic.Bool
	lastCommit    atomic.Pointer[Commit] // the last transaction streamed (metrics)

	// renamedAway maps a table an outbox table was renamed to (tableID)
	// to the configured name (inserts there are reported once:
	// renamedWarned).
	renamedAway, renamedWarned sync.Map
}

// New builds a reader of the inserts into the given outbox tables (which
// must have passed outbox.Table.Validate), with cfg's zero fields
// defaulted; an invalid cfg is an error naming the field.
func New(cfg Config, tables []*outbox.Table, opts ...Option) (*Reader, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Reader{cfg: cfg, tables: map[tableID]*outbox.Table{}, tableIndex: map[*outbox.Table]int{}, log: slog.New(slog.DiscardHandler),
		layouts: map[tableID]*layout{}, added: map[tableID]bool{}, refused: map[tableID]error{}, refusedErr: map[tableID]error{}}
	for _, o := range opts {
		o(r)
	}
	for _, t := range tables {
		id := r.tableID(t.Schema, t.Name)
		if other, dup := r.tables[id]; dup {
			return nil, fmt.Errorf("binlog: tables %s and %s are one table on a source with lower_case_table_names=%d",
				other.FullName(), t.FullName(), cfg.LowerCaseTableNames)
		}
		r.tables[id] = t
		r.tableIndex[t] = len(r.tableList)
		r.tableList = append(r.tableList, t)
	}
	return r, nil
}

// Connected reports whether the binlog stream is up.
func (r *Reader) Connected() bool { return r.connected.Load() }

// LastCommit is the last whole transaction the stream read (not
// necessarily published or checkpointed yet), for metrics.
func (r *Reader) LastCommit() (Commit, bool) {
	c := r.lastCommit.Load()
	if c == nil {
		return Commit{}, false
	}
	return *c, true
}

// LastReceived is when the stream last heard from its source (an event or
// a heartbeat), zero before the first: a reader that hears nothing for
// longer than a few heartbeat periods is cut off or stuck.
func (r *Reader) LastReceived() time.Time {
	if recv := r.lastRecvTime.Load(); recv != 0 {
		return time.Unix(0, recv)
	}
	return time.Time{}
}

// Lag is how far the stream is behind the source: zero when idle and the
// source's heartbeats are arriving, growing when nothing arrives at all.
func (r *Reader) Lag(now time.Time) time.Duration {
	recv := r.lastRecvTime.Load()
	if recv == 0 {
		return 0
	}
	ev := r.lastEventTime.Load()
	lag := time.Duration(0)
	if ev > 0 {
		lag = time.Unix(0, recv).Sub(time.Unix(ev, 0))
		if lag < 0 {
			lag = 0
		}
	}
	// Nothing received for longer than the heartbeat period: the stream is
	// stuck or cut, and the silence counts as lag.
	if silence := now.Sub(time.Unix(0, recv)) - r.cfg.Heartbeat; silence > 0 {
		lag += silence
	}
	return lag
}

// Run streams from start until ctx ends or an unrecoverable error. Events go
// to out in binlog order; out is bounded, which is the backpressure.
// When ctx ends, Run finishes the open transaction first (up to
// StopTimeout), so the last event sent is a commit and a restart replays
// nothing. Connection and replication errors are retried with backoff from
// the last whole transaction; rows of a transaction already emitted before a
// reconnect are not emitted again, over any number of reconnects. Run
// returns ErrPositionPurged only when the source says the start position is
// purged, and ErrServerIDConflict when another replica keeps taking the
// relay's server_id.
func (r *Reader) Run(ctx context.Context, start Position, out chan<- Event) error {
	tracker, err := NewTracker(start)
	if err != nil {
		return err
	}
	streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStream()
	s := &stream{r: r, out: out, tracker: tracker, cancel: cancelStream, renames: r.newRenameTracker()}
	stopWatch := context.AfterFunc(ctx, func() {
		s.stopping.Store(true)
		// Between transactions: stop now, and no transaction may begin
		// after (beginTx refuses). Inside one: its commit stops the stream.
		if s.phase.CompareAndSwap(phaseIdle, phaseStopped) {
			cancelStream()
		}
		time.AfterFunc(r.cfg.StopTimeout, cancelStream)
	})
	defer stopWatch()
	wait := backoff.Backoff{Initial: r.cfg.ReconnectMin, Max: r.cfg.ReconnectMax}
	failures, conflicts := 0, 0
	if err := r.failover(streamCtx, tracker, ""); err != nil {
		return err
	}
	for {
		began := time.Now()
		progressed, err := s.run(streamCtx)
		r.connected.Store(false)
		if progressed && time.Since(began) > time.Minute {
			conflicts = 0 // a stream that held for a while: no live twin
		}
		if streamCtx.Err() != nil || s.stopping.Load() {
			return nil
		}
		switch kind, myErr := classifyReplError(err); kind {
		case replErrPurged:
			return fmt.Errorf("%w (%s): %s", ErrPositionPurged, tracker.Position(), myErr.Message)
		case replErrServerID:
			// Never a jump ahead: the position is fine, another replica
			// holds the same identity. Retry with backoff a few times (a
			// restarted relay can race its own old connection), then stop.
			conflicts++
			r.log.Error("the source dropped the binlog stream: another replica uses the same server_id",
				"server_id", r.cfg.ServerID, "source", r.addr(),
				"attempt", conflicts, "error", myErr.Message)
			if conflicts >= serverIDConflictAttempts {
				return fmt.Errorf("%w (server_id %d at %s, %d attempts): %s; give each reader its own server_id",
					ErrServerIDConflict, r.cfg.ServerID, r.addr(), conflicts, myErr.Message)
			}
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return fatal.err
		}
		if progressed && conflicts == 0 {
			wait.Reset()
			failures = 0
		}
		if failures++; r.failoverFn != nil && failures >= r.cfg.FailoverAfter {
			r.log.Warn("binlog stream keeps failing; failing over", "error", err, "attempts", failures,
				"source", r.addr(), "gtid", tracker.Position().GTIDSet)
			if err := r.failover(streamCtx, tracker, r.addr()); err != nil {
				return err
			}
			wait.Reset()
			failures = 0
			continue
		}
		pause := wait.Next()
		r.log.Warn("binlog stream lost, reconnecting", "error", err, "backoff", pause,
			"gtid", tracker.Position().GTIDSet)
		if backoff.Sleep(streamCtx, pause) != nil {
			return nil
		}
	}
}

func (r *Reader) addr() string {
	return net.JoinHostPort(r.cfg.Host, strconv.Itoa(int(r.cfg.Port)))
}

// failover asks the FailoverFunc for the server to stream from next. Host and
// Port are only read and written on Run's goroutine.
func (r *Reader) failover(ctx context.Context, tracker *Tracker, failed string) error {
	if r.failoverFn == nil {
		return nil
	}
	host, port, err := r.failoverFn(ctx, tracker.Position(), failed)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopping
		}
		return fmt.Errorf("choosing a source: %w", err)
	}
	r.cfg.Host, r.cfg.Port = host, port
	return nil
}

// fatalError stops the reader instead of reconnecting.
type fatalError struct{ err error }

func (f *fatalError) Error() string { return f.err.Error() }
func (f *fatalError) Unwrap() error { return f.err }

// stream is one connection's worth of state plus what must survive a
// reconnect (the tracker, the partial transaction and prepared XA branches).
type stream struct {
	r       *Reader
	out     chan<- Event
	tracker *Tracker
	// renames follows the outbox tables through RENAME statements from
	// the stream's start (rename.go).
	renames *tablerename.Tracker

	// The open transaction: its GTID, whether it is inside BEGIN..COMMIT,
	// how many of its outbox row images were read so far on this
	// connection (each image's index in the transaction), and its rows
	// held until the commit (txrows.go).
	txGTID TxGTID
	inTx   bool
	txRows int
	tx     txState
	// done is how many leading rows of the open transaction were handled
	// (sent or filtered out), over every connection that read it. After a
	// reconnect the stream restarts at the last whole transaction and skips
	// rows below skipUpTo of that transaction (matched by GTID, or by being
	// the first transaction read when the source has no GTID). Both survive
	// any number of reconnects inside one transaction: a cut before the
	// transaction is read again leaves them as they are.
	done      int
	skipGTID  TxGTID
	skipUpTo  int
	skipByPos bool
	skipTx    bool // the open transaction is the one being resumed

	// XA: the branch between XA START and XA PREPARE being read, and the
	// prepared branches waiting for XA COMMIT or XA ROLLBACK.
	xa *xaBranch
	xaPrepared
	// lastPos is where the last event read ends in tracker.file (errors
	// name it).
	lastPos uint32

	// phase is phaseOpen from a transaction's first event until its commit
	// marker is sent; a stop request waits for it to end. A stop decided
	// between transactions sets phaseStopped, and no transaction begins
	// after it, so the reader never sends rows of a transaction without
	// its commit (up to StopTimeout).
	phase    atomic.Int32
	stopping atomic.Bool
	cancel   context.CancelFunc
}

// A stream's phases (stream.phase).
const (
	phaseIdle int32 = iota
	phaseOpen
	phaseStopped
)

// password is the password for the next connection (Config.PasswordFunc).
func (r *Reader) password(ctx context.Context) (string, error) {
	if r.cfg.PasswordFunc == nil {
		return r.cfg.Password, nil
	}
	pw, err := r.cfg.PasswordFunc(ctx, r.addr())
	if err != nil {
		return "", fmt.Errorf("getting the password for %s: %w", r.addr(), err)
	}
	return pw, nil
}

func (s *stream) newSyncer(password string) *replication.BinlogSyncer {
	r := s.r
	return replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:  r.cfg.ServerID,
		Flavor:    r.cfg.Flavor,
		Host:      r.cfg.Host,
		Port:      r.cfg.Port,
		User:      r.cfg.User,
		Password:  password,
		TLSConfig: r.cfg.TLS,
		// The reader reconnects itself, from the last whole transaction.
		DisableRetrySync: true,
		// The reader keeps its own GTID set; no per-commit clone.
		DiscardGTIDSet:  true,
		HeartbeatPeriod: r.cfg.Heartbeat,
		// go-mysql buffers 10240 parsed events by default (~80 MB of 8 KB
		// row events, gigabytes of 1 MiB ones) outside the relay's byte
		// budget; the reader's own bounded channel is the buffer that
		// matters, so keep this one small: 32 events of 1 MiB rows is
		// 32 MiB, and a buffer of 32 still decouples parsing from the
		// reader on a busy stream.
		EventCacheCount: 32,
		ReadTimeout:     r.cfg.Heartbeat*3 + 5*time.Second,
		ParseTime:       true,
		// A JSON column's binary value is turned into the text MySQL itself
		// prints (key order, 1.0 stays a double), not Go's re-encoding.
		RenderJSONAsMySQLText: true,
		// Only rows events of outbox tables are decoded; the rest are
		// skipped after the header.
		RowsEventDecodeFunc: r.decodeRows,
		Logger:              slog.New(slog.DiscardHandler),
	})
}

func (s *stream) run(ctx context.Context) (progressed bool, err error) {
	password, err := s.r.password(ctx)
	if err != nil {
		return false, err // retried like a connection that failed
	}
	syncer := s.newSyncer(password)
	defer syncer.Close()
	pos := s.tracker.Position()
	s.resume()

	var set mysql.GTIDSet
	if pos.HasGTID() {
		var perr error
		if set, perr = parseGTIDSet(pos.Flavor, pos.GTIDSet); perr != nil {
			return false, &fatalError{fmt.Errorf("parsing start GTID set: %w", perr)}
		}
	}
	streamer, err := sourceinfo.StartSync(syncer, set, pos.File, pos.Pos)
	if err != nil {
		// A server without an RSA key (sourceinfo.ErrNoRSAKey) is retried
		// like any connection that failed: a restarted server may have one.
		return false, fmt.Errorf("starting binlog stream at %s: %w", pos, err)
	}
	s.r.connected.Store(true)
	s.r.log.Info("binlog stream connected", "gtid", pos.GTIDSet,
		"binlog_file", pos.File, "binlog_pos", pos.Pos)
	for {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			return progressed, streamError(err, s.tracker.file, s.lastPos)
		}
		progressed = true
		if err := s.handleSafely(ctx, ev); err != nil {
			return progressed, err
		}
	}
}

// resume prepares a new connection, which starts at the last whole
// transaction. If the cut came inside a transaction, the rows of it already
// emitted are skipped when it is read again. A cut before the transaction
// was read again (not open) keeps the skip as it is.
func (s *stream) resume() {
	if s.phase.Load() == phaseOpen {
		s.skipUpTo = max(s.skipUpTo, s.done)
		if !s.txGTID.IsZero() {
			s.skipGTID, s.skipByPos = s.txGTID, false
		} else if s.skipGTID.IsZero() {
			s.skipByPos = true
		}
	}
	// An XA branch cut before its XA PREPARE is read again whole.
	s.xa = nil
	s.inTx, s.txRows, s.txGTID, s.skipTx = false, 0, TxGTID{}, false
	s.tx = txState{}
	s.phase.CompareAndSwap(phaseOpen, phaseIdle)
}

// handleSafely runs handle and turns a panic in it (go-mysql decodes row
// values lazily in places) into an error naming the event's position.
func (s *stream) handleSafely(ctx context.Context, ev *replication.BinlogEvent) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &fatalError{fmt.Errorf("binlog event %s ending at %s:%d could not be handled: %v",
				ev.Header.EventType, s.tracker.file, ev.Header.LogPos, p)}
		}
	}()
	if err := s.handle(ctx, ev); err != nil {
		return err
	}
	if ev.Header.LogPos > 0 {
		s.lastPos = ev.Header.LogPos
	}
	return nil
}

// fileMeta reports the events a server sends when a stream starts or a
// file begins (rotate, format description, GTID lists, checkpoints). They
// carry the time the binlog file was created, not the time of a change, so
// they do not count as the stream's position in time: a relay that starts
// on a file created an hour ago is not an hour behind.
func fileMeta(ev *replication.BinlogEvent) bool {
	switch ev.Event.(type) {
	case *replication.RotateEvent, *replication.FormatDescriptionEvent, *replication.PreviousGTIDsEvent,
		*replication.MariadbGTIDListEvent, *replication.MariadbBinlogCheckPointEvent:
		return true
	}
	return false
}

// noteTime records when ev arrived and the time it speaks for, which Lag
// compares.
func (s *stream) noteTime(ev *replication.BinlogEvent) {
	r := s.r
	now := time.Now().UnixNano()
	if _, hb := ev.Event.(*replication.HeartbeatEvent); !hb && ev.Header.Timestamp > 0 && !fileMeta(ev) {
		r.lastEventTime.Store(int64(ev.Header.Timestamp))
	} else if hb && !s.inTx {
		// A heartbeat while idle: the stream is current.
		r.lastEventTime.Store(now / int64(time.Second))
	}
	r.lastRecvTime.Store(now)
}

// handle reads one event into the stream: positions, transaction bounds,
// DDL and rows.
func (s *stream) handle(ctx context.Context, ev *replication.BinlogEvent) error {
	s.noteTime(ev)

	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		s.tracker.file = string(e.NextLogName)
		s.tracker.pos = uint32(e.Position)
		s.lastPos = uint32(e.Position)
	case *replication.MariadbGTIDEvent:
		return s.mariadbGTID(e)
	case *replication.GTIDEvent:
		return s.mysqlGTID(e)
	case *replication.GtidTaggedLogEvent:
		// MySQL 8.3+ GTID with a tag (uuid:tag:gno).
		return s.mysqlGTID(&e.GTIDEvent)
	case *replication.TransactionPayloadEvent:
		// binlog_transaction_compression=ON (MySQL 8.0.20+): the
		// transaction's events (BEGIN, TABLE_MAP, rows, XID) come inside one
		// ZSTD payload after its GTID event. go-mysql decodes them with the
		// same options (and row decoder) as the outer stream, and stamps the
		// last one, the commit, with the payload's end position; handle them
		// as if they had come one by one.
		for _, inner := range e.Events {
			if err := s.handle(ctx, inner); err != nil {
				return err
			}
		}
	case *replication.QueryEvent:
		return s.query(ctx, ev, e)
	case *replication.XIDEvent:
		return s.commit(ctx, ev)
	case *replication.RowsEvent:
		if s.r.matcher != nil && e.Table != nil {
			// Matched by the parser's decodeRows already, as a rule; a
			// table met first here is matched now.
			s.r.outboxTable(string(e.Table.Schema), string(e.Table.Table))
			s.announce(string(e.Table.Schema), string(e.Table.Table))
		}
		if e.Rows == nil {
			s.noteUnread(ev, e)
			return nil // not an outbox table: skipped at decode
		}
		return s.emitRows(ctx, ev, e)
	case *replication.GenericEvent:
		if ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT {
			return s.xaPrepare(ctx, ev, e.Data)
		}
	}
	return nil
}

// query handles a query event: BEGIN, COMMIT, an XA statement, or DDL
// (or a statement-format event).
func (s *stream) query(ctx context.Context, ev *replication.BinlogEvent, e *replication.QueryEvent) error {
	q := strings.TrimSpace(string(e.Query))
	if xa, ok := parseXA(q); ok {
		return s.xaStatement(ctx, ev, xa)
	}
	switch {
	case strings.EqualFold(q, "BEGIN"):
		if s.txGTID.IsZero() {
			if err := s.beginTx(TxGTID{}); err != nil {
				return err
			}
		}
		s.inTx = true
	case strings.EqualFold(q, "COMMIT"):
		return s.commit(ctx, ev)
	default:
		// DDL (or a statement-format event): a whole transaction of its
		// own unless inside BEGIN. Column layouts may change at this point.
		if err := s.renamed(ctx, ev, string(e.Schema), q); err != nil {
			return err
		}
		s.r.noteDDL(string(e.Schema), q)
		s.tableDDL(ev, string(e.Schema), q) // tableddl.go
		if !s.inTx {
			return s.commit(ctx, ev)
		}
	}
	return nil
}

// mariadbGTID opens the event group a MariaDB GTID event begins.
func (s *stream) mariadbGTID(e *replication.MariadbGTIDEvent) error {
	g := e.GTID
	if err := s.beginTx(TxGTID{mariadb: &g}); err != nil {
		return err
	}
	// A standalone event group (DDL, or a non-transactional statement)
	// has no BEGIN...XID: its one query event ends it.
	s.inTx = !e.IsStandalone()
	if e.Flags&mariadbFlPreparedXA != 0 {
		// MariaDB logs XA START inside the GTID event ("XA START
		// X'..',X'',1 GTID 0-1-5"): the group is an XA branch ending
		// with XA END and XA_PREPARE_LOG_EVENT.
		s.xa = &xaBranch{}
		s.inTx = true
	}
	return nil
}

func (s *stream) mysqlGTID(e *replication.GTIDEvent) error {
	sid, err := uuid.FromBytes(e.SID)
	if err != nil {
		return &fatalError{fmt.Errorf("decoding GTID event at %s:%d: %w", s.tracker.file, s.lastPos, err)}
	}
	g := TxGTID{sid: sid, tag: e.Tag, gno: e.GNO}
	if e.GNO == 0 {
		g = TxGTID{} // ANONYMOUS_GTID_EVENT: GTID mode off
	}
	if err := s.beginTx(g); err != nil {
		return err
	}
	s.inTx = false // MySQL sends an explicit BEGIN query for DML.
	return nil
}

// beginTx opens a transaction (or goes on with the open one: MySQL's
// anonymous transactions begin at their GTID event and again at BEGIN). It
// returns context.Canceled when a stop was decided before it.
func (s *stream) beginTx(g TxGTID) error {
	if !s.phase.CompareAndSwap(phaseIdle, phaseOpen) && s.phase.Load() != phaseOpen {
		return context.Canceled
	}
	s.txGTID, s.txRows, s.tx = g, 0, txState{}
	s.skipTx = s.skipUpTo > 0 && (s.skipByPos || (!g.IsZero() && g.equal(s.skipGTID)))
	s.done = 0
	if s.skipTx {
		s.done = s.skipUpTo
	}
	return nil
}

func (s *stream) commit(ctx context.Context, ev *replication.BinlogEvent) error {
	if err := s.endTx(ctx, ev); err != nil {
		return err
	}
	c := Commit{GTID: s.txGTID, File: s.tracker.file, Pos: ev.Header.LogPos, Time: ev.Header.Timestamp, OpenXA: s.heldRows > 0}
	if err := s.tracker.Apply(c); err != nil {
		return &fatalError{fmt.Errorf("tracking GTID %s: %w", c.GTID, err)}
	}
	s.inTx, s.txRows, s.txGTID = false, 0, TxGTID{}
	s.done, s.skipUpTo, s.skipGTID, s.skipByPos, s.skipTx = 0, 0, TxGTID{}, false, false
	s.r.lastCommit.Store(&c)
	// The marker goes out before the transaction counts as ended: a stop
	// cancels the stream only between transactions, so it cannot drop the
	// commit of rows already sent.
	if err := send(ctx, s.out, Event{Kind: KindCommit, Commit: c}); err != nil {
		return err
	}
	s.phase.CompareAndSwap(phaseOpen, phaseIdle)
	if s.stopping.Load() {
		s.cancel()
		return context.Canceled
	}
	return nil
}

// errorAt names a rows event that could not be decoded.
func errorAt(t *outbox.Table, ev *replication.BinlogEvent, s *stream, err error) error {
	return fmt.Errorf("binlog: rows event of %s at %s:%d (GTID %s): %w",
		t.FullName(), s.tracker.file, ev.Header.LogPos, s.txGTID, err)
}

func rowImageError(t *outbox.Table, ev *replication.BinlogEvent, s *stream, col string) error {
	return fmt.Errorf("binlog: a rows event of %s.%s at %s:%d leaves column %s out of its row image (binlog_row_image=MINIMAL?): set binlog_row_image=FULL on the source",
		t.Schema, t.Name, s.tracker.file, ev.Header.LogPos, col)
}

// emitRow sends one row of a committed XA branch (in its XA COMMIT
// transaction) unless an earlier connection already sent it.
func (s *stream) emitRow(ctx context.Context, row *outbox.Row) error {
	i := s.txRows
	s.txRows++
	if s.skipTx && i < s.skipUpTo {
		return nil
	}
	if err := send(ctx, s.out, Event{Kind: KindRow, Row: row}); err != nil {
		return err
	}
	s.done = max(s.done, i+1)
	return nil
}

// decodeRows runs in go-mysql's parser: decode only the header, and the rows
// only for rows events of an outbox table (UPDATEs and DELETEs too: a
// transaction's later writes of a row it inserted, and re-queues).
// Everything else keeps Rows nil.
func (r *Reader) decodeRows(e *replication.RowsEvent, data []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			table := "an unknown table"
			if e.Table != nil {
				table = string(e.Table.Schema) + "." + string(e.Table.Table)
			}
			err = fmt.Errorf("decoding a rows event of %s: %v", table, p)
		}
	}()
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	partial := false
	switch e.Type() {
	case replication.EnumRowsEventTypeInsert, replication.EnumRowsEventTypeUpdate, replication.EnumRowsEventTypeDelete:
	default:
		// go-mysql's Type calls a PARTIAL_UPDATE_ROWS_EVENT unknown; it is
		// the one other rows event with an after image (partialjson.go).
		if e.ColumnBitmap2 == nil {
			return nil
		}
		partial = true
	}
	if r.outboxTable(string(e.Table.Schema), string(e.Table.Table)) == nil {
		return nil
	}
	if err := e.DecodeData(pos, data); err != nil {
		return err
	}
	if partial {
		resolvePartialJSON(e, data, pos)
	}
	return nil
}

// send delivers an event unless ctx ends first.
func send(ctx context.Context, out chan<- Event, ev Event) error {
	select {
	case out <- ev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

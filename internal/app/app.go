// Package app wires the relay's stages from a config: connections, start-up
// checks, the start position and the run loop. cmd/binlog-relay is a thin
// shell over it; tests drive it in-process.
package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
	"github.com/binlog-relay/binlog-relay/internal/binlog"
	"github.com/binlog-relay/binlog-relay/internal/checkpoint"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/status"
)

// App holds the connections of one relay.
type App struct {
	Cfg     *config.Config
	Log     *zap.Logger
	Source  *sql.DB
	Primary *sql.DB
	Redis   *redis.Client
	Store   checkpoint.Store

	flavor string
	server string
	relay  atomic.Pointer[relay.Relay]

	stopMu    sync.Mutex
	stopHooks []func()

	ops    ops        // metrics and health (http.go)
	leader leadership // whether this relay streams now (leader.go)

	// Build names the running build in binlog_relay_build_info.
	Build BuildInfo

	headerWarned sync.Map // table and header of a header left out, warned once (headers.go)

	src   *sources                    // source.hosts, nil with one source (ha.go)
	lease atomic.Pointer[lease.Lease] // the leader lease with ha.enabled (ha.go)

	replica replicaWatch // source replica health and delay (replica.go)
	gap     gapState     // purged positions and instances (gap.go)

	// AcceptGap lets the relay restart at the current position when its
	// saved one was purged even for tables without a status column, whose
	// rows in the gap are then lost (`run --accept-gap`, gap.go).
	AcceptGap bool
	starting  atomic.Bool // Run is starting: a second relay is an error, not a warning
}

// Relay returns the running relay (nil before Run built it), for tests and
// metrics.
func (a *App) Relay() *relay.Relay { return a.relay.Load() }

// Open prepares connections; nothing is dialled until used.
func Open(cfg *config.Config, log *zap.Logger) (*App, error) {
	if err := checkStages(cfg); err != nil { // stages.go
		return nil, err
	}
	a := &App{Cfg: cfg, Log: log}
	routeRedisLogs(log)
	dsn, err := cfg.Source.DSN("source")
	if err != nil {
		return nil, err
	}
	if a.Source, err = sql.Open("mysql", dsn); err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	if len(cfg.Source.Hosts) > 1 { // a.Source dials whichever is read now (ha.go)
		if a.src, err = newSources(cfg.Source, log.Named("source")); err != nil {
			return nil, err
		}
		_ = a.Source.Close()
		a.Source = sql.OpenDB(a.src)
	}
	a.Source.SetMaxOpenConns(4)
	if dsn, err = cfg.Primary.DSN("primary"); err != nil {
		return nil, err
	}
	if a.Primary, err = sql.Open("mysql", dsn); err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	a.Primary.SetMaxOpenConns(8)
	a.Primary.SetConnMaxIdleTime(5 * time.Minute)
	rtls, err := cfg.Redis.TLS.TLSConfig("redis")
	if err != nil {
		return nil, err
	}
	a.Redis = redis.NewClient(&redis.Options{Addr: cfg.Redis.Addr, Username: cfg.Redis.Username,
		Password: cfg.Redis.Password, DB: cfg.Redis.DB, TLSConfig: rtls,
		DialTimeout: 3 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
		MaxRetries: 1})
	a.Store = &checkpoint.Redis{Client: a.Redis, Key: cfg.Checkpoint.Key}
	return a, nil
}

// Close releases the connections.
func (a *App) Close() {
	_ = a.Source.Close()
	_ = a.Primary.Close()
	_ = a.Redis.Close()
}

// Flavor detects (once) whether the source is MySQL or MariaDB.
func (a *App) Flavor(ctx context.Context) (string, error) {
	if a.flavor != "" {
		return a.flavor, nil
	}
	if f := a.Cfg.Source.Flavor; f == "mysql" || f == "mariadb" {
		a.flavor = f
		return f, nil
	}
	var version string
	if err := a.Source.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", fmt.Errorf("source %s: %w", a.Cfg.Source.Redacted(), err)
	}
	a.flavor = binlog.FlavorMySQL
	if strings.Contains(strings.ToLower(version), "mariadb") {
		a.flavor = binlog.FlavorMariaDB
	}
	return a.flavor, nil
}

// ServerIdentity names the source in checkpoints: server_uuid on MySQL,
// server_id on MariaDB (which has no uuid).
func (a *App) ServerIdentity(ctx context.Context) (string, error) {
	if a.server != "" {
		return a.server, nil
	}
	flavor, err := a.Flavor(ctx)
	if err != nil {
		return "", err
	}
	q := "SELECT CONCAT('server_id=', @@server_id)"
	if flavor == binlog.FlavorMySQL {
		q = "SELECT @@server_uuid"
	}
	if err := a.Source.QueryRowContext(ctx, q).Scan(&a.server); err != nil {
		return "", fmt.Errorf("reading the source's identity: %w", err)
	}
	return a.server, nil
}

// CurrentPosition is where the source's binlog ends now.
func (a *App) CurrentPosition(ctx context.Context) (binlog.Position, error) {
	flavor, err := a.Flavor(ctx)
	if err != nil {
		return binlog.Position{}, err
	}
	p := binlog.Position{Flavor: flavor}
	file, pos, err := masterStatus(ctx, a.Source)
	if err != nil {
		return p, err
	}
	p.File, p.Pos = file, pos
	var gtid sql.NullString
	if flavor == binlog.FlavorMariaDB {
		err = a.Source.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&gtid)
	} else {
		var mode string
		if err = a.Source.QueryRowContext(ctx, "SELECT @@gtid_mode").Scan(&mode); err == nil && strings.EqualFold(mode, "ON") {
			err = a.Source.QueryRowContext(ctx, "SELECT @@gtid_executed").Scan(&gtid)
		}
	}
	if err != nil {
		return p, fmt.Errorf("reading the source's GTID position: %w", err)
	}
	// An empty set (a server that never logged a GTID transaction) starts
	// by file/pos; the tracker picks GTIDs up from the first transaction.
	p.GTIDSet = strings.ReplaceAll(gtid.String, "\n", "")
	return p, nil
}

// masterStatus reads SHOW MASTER STATUS (SHOW BINARY LOG STATUS on MySQL
// 8.4+) by column name, as the column set differs between versions.
func masterStatus(ctx context.Context, db *sql.DB) (string, uint32, error) {
	rows, err := db.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		rows, err = db.QueryContext(ctx, "SHOW BINARY LOG STATUS")
		if err != nil {
			return "", 0, fmt.Errorf("reading the source's binlog position: %w", err)
		}
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", 0, err
	}
	if !rows.Next() {
		return "", 0, errors.New("the source has binary logging off (SHOW MASTER STATUS is empty): start it with log_bin")
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", 0, err
	}
	var file string
	var pos uint64
	for i, c := range cols {
		switch c {
		case "File":
			file = string(vals[i])
		case "Position":
			pos, _ = strconv.ParseUint(string(vals[i]), 10, 32)
		}
	}
	return file, uint32(pos), nil
}

// StartPosition is the saved checkpoint or, without one, the source's
// current position (rows committed earlier are the sweeper's).
func (a *App) StartPosition(ctx context.Context) (binlog.Position, bool, error) {
	cp, err := a.Store.Load(ctx)
	if err == nil {
		return cp.Position(), true, nil
	}
	if !errors.Is(err, checkpoint.ErrNotFound) {
		return binlog.Position{}, false, err
	}
	p, err := a.CurrentPosition(ctx)
	return p, false, err
}

// build makes the relay's stages.
// Checkpoints go to store; guard (may be nil) is asked before each publish.
func (a *App) build(ctx context.Context, store checkpoint.Store, guard func() error) (*relay.Relay, error) {
	cfg := a.Cfg
	flavor, err := a.Flavor(ctx)
	if err != nil {
		return nil, err
	}
	server, err := a.ServerIdentity(ctx)
	if err != nil {
		return nil, err
	}
	stls, err := cfg.Source.TLSConfig("source")
	if err != nil {
		return nil, err
	}
	reader, err := binlog.New(binlog.Config{
		Host: cfg.Source.Host, Port: uint16(cfg.Source.Port), User: cfg.Source.User,
		Password: cfg.Source.Password, TLS: stls, ServerID: cfg.Source.ServerID, Flavor: flavor,
		Heartbeat: cfg.Relay.Heartbeat, Failover: a.failoverHook(),
		XABufferRows: cfg.Source.XABufferRows, XABufferBytes: cfg.Source.XABufferBytes,
	}, cfg.Tables, &binlog.InfoSchema{DB: a.Source}, a.Log.Named("binlog"))
	if err != nil {
		return nil, err
	}
	rt, err := a.newRouter() // headers.go
	if err != nil {
		return nil, err
	}
	lanes, err := a.newLanes()
	if err != nil {
		return nil, err
	}
	sw := status.NewWriter(a.Primary, retryBackoff(cfg))
	if err := sw.LoadErrorLimits(ctx, cfg.Tables); err != nil {
		// Read again at the first failed publish; meanwhile reasons are capped.
		a.Log.Warn("reading the error columns' lengths failed", zap.Error(err))
	}
	a.watch(reader, lanes)
	rc := relayConfig(cfg) // stages.go; validated by Open
	rc.Server, rc.Observer, rc.Guard = server, a.observer(), guard
	return relay.New(rc, reader, rt, lanes.relayLanes(), sw, store, a.Log.Named("relay")), nil
}

// newLanes builds the relay's publishers, one per lane (relay.lanes). With
// several lanes each has its own connection, named after the lane, and
// strict ordering holds per key (publisher.Config.PerKey).
func (a *App) newLanes() (publishers, error) {
	cfg := a.Cfg
	n := max(cfg.Relay.Lanes, 1)
	strict := cfg.Relay.Ordering == "strict"
	out := make(publishers, n)
	for i := range out {
		name, log := cfg.Name, a.Log.Named("publisher")
		if n > 1 {
			name, log = fmt.Sprintf("%s-lane-%d", cfg.Name, i), log.With(zap.Int("lane", i))
		}
		p, err := a.newPublisher(name, strict, n > 1, log)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// publishers are the relay's lanes, seen as one broker client by the
// health and metrics endpoints.
type publishers []*publisher.Publisher

// Connected reports whether every lane is connected.
func (ps publishers) Connected() bool {
	for _, p := range ps {
		if !p.Connected() {
			return false
		}
	}
	return len(ps) > 0
}

// Republished adds up the lanes' possible duplicates.
func (ps publishers) Republished() uint64 {
	var n uint64
	for _, p := range ps {
		n += p.Republished()
	}
	return n
}

func (ps publishers) relayLanes() []relay.Lane {
	out := make([]relay.Lane, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

// newPublisher builds a broker publisher (one ordered confirming channel)
// from the broker config.
func (a *App) newPublisher(connName string, strict, perKey bool, log *zap.Logger) (*publisher.Publisher, error) {
	cfg := a.Cfg
	btls, err := cfg.Broker.TLSConfig()
	if err != nil {
		return nil, err
	}
	holdMin, holdMax := holdBackoff(cfg) // stages.go
	return publisher.New(publisher.Config{URL: cfg.Broker.URL, TLS: btls, Window: cfg.Broker.Window,
		ConnectionName: connName, Strict: strict, PerKey: perKey,
		StrictRetryMin: holdMin, StrictRetryMax: holdMax,
		MaxMessageSize: cfg.Broker.MaxMessageBytes, DeadLetterExchange: cfg.Broker.DeadLetterExchange}, log)
}

// Run checks the servers, then streams until ctx ends. A saved position the
// source no longer has is a gap (gap.go): taken when the sweeper covers it
// or the operator accepted it, refused otherwise.
func (a *App) Run(ctx context.Context) error {
	a.setMemoryLimit() // memory.go
	a.pickSource(ctx)
	if err := a.claimName(ctx); err != nil { // gap.go
		return err
	}
	defer a.releaseName()
	a.waitServerIDFree(ctx)
	a.starting.Store(true)
	if problems := a.Check(ctx); HasErrors(problems) {
		for _, p := range problems {
			a.Log.Error("start-up check failed", zap.String("problem", p.String()))
		}
		return fmt.Errorf("start-up checks failed: %s", FirstError(problems))
	}
	if a.Cfg.HA.Enabled {
		return a.runLeader(ctx) // ha.go
	}
	r, err := a.build(ctx, a.Store, nil)
	if err != nil {
		return err
	}
	a.relay.Store(r)
	a.leader.set(true) // the only relay of its name (leader.go)
	defer a.leader.set(false)
	start, resumed, err := a.StartPosition(ctx)
	if err != nil {
		return err
	}
	if !resumed {
		if err := a.startWithoutCheckpoint(ctx, start); err != nil { // gap.go
			return err
		}
	}
	a.Log.Info("relay starting", zap.Bool("from_checkpoint", resumed), zap.String("gtid", start.GTIDSet),
		zap.String("binlog_file", start.File), zap.Uint32("binlog_pos", start.Pos),
		zap.String("checkpoint_key", a.Cfg.Checkpoint.Key))
	g, gctx := errgroup.WithContext(ctx)
	for _, svc := range a.services() {
		g.Go(func() error { return svc(gctx) })
	}
	g.Go(func() error {
		defer a.stopServices()
		return a.stream(gctx, r, start)
	})
	return g.Wait()
}

// stream runs the binlog path. A purged position is a gap (gap.go): the
// stream restarts at the current position or stops with the refusal. A
// second replica with this server_id is never answered by a jump: the
// stream retries from its last checkpoint with backoff until the other one
// goes.
func (a *App) stream(ctx context.Context, r *relay.Relay, start binlog.Position) error {
	ref := &streamRef{r: r, start: start}
	a.replica.streaming.Store(ref)
	defer func() { a.replica.streaming.CompareAndSwap(ref, nil) }()
	wait := backoff.Backoff{Initial: time.Second, Max: 30 * time.Second}
	for {
		began := time.Now()
		err := r.Run(ctx, start)
		resume := start
		if cp, ok := r.LastCheckpoint(); ok {
			resume = cp.Position()
		}
		switch {
		case err == nil:
			a.Log.Info("relay stopped", zap.Int64("published", r.Stats.Published.Load()))
			return nil
		case ctx.Err() != nil:
			return err
		case serverIDConflict(err):
			if time.Since(began) > time.Minute {
				wait.Reset()
			}
			pause := wait.Next()
			hint := a.conflictHint()
			a.gap.set("binlog stream from "+a.sourceAddr()+" dropped: "+hint, max(pause, instanceTTL)+pause)
			a.Log.Error("binlog stream dropped by the source: another replica connected with this relay's server_id. Retrying from the last checkpoint; nothing is skipped",
				zap.Uint32("server_id", a.Cfg.Source.ServerID), zap.String("fix", hint), zap.Duration("backoff", pause),
				zap.String("gtid", resume.GTIDSet), zap.String("binlog_file", resume.File), zap.Uint32("binlog_pos", resume.Pos), zap.Error(err))
			if backoff.Sleep(ctx, pause) != nil {
				return nil
			}
			start = resume
		case errors.Is(err, binlog.ErrPositionPurged):
			now, gerr := a.purgedGap(ctx, resume, err)
			if gerr != nil {
				return gerr
			}
			start = now
		default:
			return err
		}
		ref = &streamRef{r: r, start: start}
		a.replica.streaming.Store(ref)
	}
}

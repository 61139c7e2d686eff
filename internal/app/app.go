// Package app owns one relay process: opening its connections, the stage
// Configs converted once from the config (stages.go), the wiring of the
// stages from them (wiring.go, streams.go, sweep.go), running the binlog
// path and the services beside it (run.go, services.go), and HA terms
// under the leader lease (ha.go). It is the composition root: the checks
// are internal/preflight's, the one-shot commands internal/command's, the
// source internal/source's, replica health internal/replica's, where to
// start internal/startpos's, one relay per name internal/instance's, and
// what the relay reports over HTTP internal/ops's; app hands each the
// connections and config values it needs (check.go, commands.go,
// replica.go, guards.go, http.go, ready.go, metrics.go).
// cmd/binlog-relay is a thin shell over it; tests drive it in-process.
package app

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"

	_ "github.com/go-sql-driver/mysql" // database/sql driver
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/internal/redisconn"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/replica"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// App is one relay process: its connections and the state its commands,
// services and endpoints share.
type App struct {
	Cfg     *config.Config
	Log     *zap.Logger
	Source  *source.Source // the source read now: its pool, address, flavor and identity
	Primary *sql.DB
	Redis   redis.UniversalClient // one Redis, a Sentinel group's master or a Cluster (connections.go)
	Store   checkpoint.Store

	stages stages // the stage Configs, built and validated by Open (stages.go)

	relay atomic.Pointer[relay.Relay]

	stops stopHooks // run once the binlog path drained (services.go)

	ops    watched     // metrics and health (metrics.go, ready.go)
	leader ops.Leading // whether this relay streams now

	// Build names the running build in binlog_relay_build_info.
	Build ops.BuildInfo

	wire *wiring // builds the stages (wiring.go)

	lease atomic.Pointer[lease.Lease] // the leader lease with ha.enabled (ha.go)

	checkpoints *redisconn.Checkpoints // the checkpoint stores (a term's is fenced, ha.go)

	replica replica.Watch // source replica health and delay (replica.go)
	guard   guards        // one relay per name and server_id, the gap policy (guards.go)
	notice  ops.Notice    // /readyz: a gap taken, a server_id conflict, two relays with one name

	console consoleState // the operator's console at /ui (console.go)

	tablesMu sync.Mutex
	tables   tableSet // the entries under tables: and what they match (tables.go)
	tenants  tenants  // pattern entries' tables that come and go while streaming (tenants.go)

	// AcceptGap lets the relay restart at the current position when its
	// saved one was purged even for tables without a status column, whose
	// rows in the gap are then lost (`run --accept-gap`, internal/startpos).
	// Set it before Run or Check.
	AcceptGap bool
	starting  atomic.Bool // Run is starting: a second relay is an error, not a warning

	marks     *rowstatus.Writer // statusWriter
	marksOnce sync.Once
}

// Relay returns the running relay (nil before Run built it), for tests and
// metrics.
func (a *App) Relay() *relay.Relay { return a.relay.Load() }

// statusWriter is the relay's status writer, one for the App's life: its
// marks keep a session of their own on the primary (rowstatus.Writer.Image)
// across leadership terms.
func (a *App) statusWriter(ctx context.Context) *rowstatus.Writer {
	a.marksOnce.Do(func() {
		a.marks = rowstatus.NewWriter(a.Primary, a.stages.retry)
		a.marks.Image = a.Cfg.Relay.MarkRowImage
		a.marks.Sessions = a.stages.relay.MarkSessions
	})
	sw := a.marks
	if err := sw.LoadErrorLimits(ctx, a.Cfg.Tables); err != nil {
		// Read again at the first failed publish; meanwhile reasons are capped.
		a.Log.Warn("reading the error columns' lengths failed", zap.Error(err))
	}
	switch image, err := sw.MarkImage(ctx); {
	case errors.Is(err, rowstatus.ErrMinimalRefused):
		a.Log.Warn("SENT marks are logged with full row images (payload twice per row): the primary user may not set binlog_row_image for its session; grant it SESSION_VARIABLES_ADMIN (MySQL) or BINLOG ADMIN (MariaDB), or set relay.mark_row_image: full",
			zap.Error(err))
	case err != nil:
		a.Log.Warn("the marks' session could not be opened yet; marks retry", zap.Error(err))
	default:
		a.Log.Info("SENT marks row image", zap.String("image", image))
	}
	return sw
}

// build makes the relay's stages.
// Checkpoints go to store; guard (may be nil) is asked before each publish.
func (a *App) build(ctx context.Context, store checkpoint.Store, guard func() error) (*relay.Relay, error) {
	server, err := a.Source.Identity(ctx)
	if err != nil {
		return nil, err
	}
	reader, err := a.wire.reader(ctx)
	if err != nil {
		return nil, err
	}
	rt, err := a.wire.router()
	if err != nil {
		return nil, err
	}
	set, err := a.wire.lanes()
	if err != nil {
		return nil, err
	}
	sw := a.statusWriter(ctx)
	a.watch(reader, set)
	rc := a.stages.relay
	rc.Server, rc.Observer, rc.Guard = a.Source.CheckpointServer(server), ops.NewObserver(a.Metrics(), a.Log.Named("relay")), guard
	flavor, err := a.Source.Flavor(ctx)
	if err != nil {
		return nil, err
	}
	// replayed rows SENT already, once the replica has the primary's last marks (relay/replaycheck.go)
	rc.Sent = rowstatus.SentReader{DB: a.Source.DB(), Primary: a.Primary, Flavor: flavor}
	rc.SeqScope = a.wire.seqScope()
	r, err := relay.New(rc, reader, rt, set.Relay(), sw, store, a.Log.Named("relay"))
	if err != nil {
		return nil, err
	}
	if err := a.wire.raiseSeqFloor(ctx, r, set); err != nil {
		return nil, err
	}
	return r, nil
}

package app

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/binlog"
	"github.com/binlog-relay/binlog-relay/internal/checkpoint"
	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/outbox"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
)

// checkpointLogEvery spaces the info line about checkpoints: saves happen
// every checkpoint.interval (1 s by default), far too often for info.
const checkpointLogEvery = 30 * time.Second

// holdGrace is how long publishing may hold behind one message before
// /readyz reports it: a strict-ordering retry that succeeds on its next
// attempt is not worth a page.
const holdGrace = 5 * time.Second

// redisPingEvery is how often the Redis connection is probed for /readyz
// and connection_up{target="redis"}.
const redisPingEvery = 2 * time.Second

// ops is what the metrics and health endpoints read: the App's metrics and
// the stages whose state they report.
type ops struct {
	once    sync.Once
	metrics *metrics.Metrics
	reader  atomic.Pointer[binlog.Reader]
	pub     atomic.Pointer[publishers]
	redisUp atomic.Bool
	addr    atomic.Pointer[string]
}

// Metrics returns the App's metrics, in a registry of its own.
func (a *App) Metrics() *metrics.Metrics {
	a.ops.once.Do(func() {
		log := zap.NewNop()
		if a.Log != nil {
			log = a.Log.Named("metrics")
		}
		m := metrics.NewWith(metrics.Config{Name: a.Cfg.Name, MaxLabelValues: a.Cfg.Metrics.MaxLabelValues}, log)
		b := a.Build.resolved()
		m.SetBuildInfo(b.Version, b.Commit)
		m.WatchConn(metrics.TargetRedis, metrics.ConnFunc(a.ops.redisUp.Load))
		m.WatchReady(func() bool { ok, _ := a.Ready(); return ok })
		m.WatchLeader(a.leader.is)
		m.WatchHold(a.heldFor)
		m.WatchRepublished(func() uint64 {
			if p := a.ops.pub.Load(); p != nil {
				return p.Republished()
			}
			return 0
		})
		m.WatchLanes(func() []int64 {
			if r := a.Relay(); r != nil {
				return r.LaneInflight()
			}
			return nil
		})
		a.ops.metrics = m
	})
	return a.ops.metrics
}

// HTTPAddr is the address /metrics, /healthz and /readyz listen on; empty
// when the server is off or not started.
func (a *App) HTTPAddr() string {
	if p := a.ops.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// watch tells the metrics and /readyz which stages to look at (build calls
// it with the ones it made).
func (a *App) watch(r *binlog.Reader, p publishers) {
	a.ops.reader.Store(r)
	a.ops.pub.Store(&p)
	m := a.Metrics()
	m.WatchStream(r)
	m.WatchConn(metrics.TargetBroker, p)
}

// observer is the relay.Observer build passes to the pipeline.
func (a *App) observer() relay.Observer {
	return &opsObserver{Metrics: a.Metrics(), log: a.Log.Named("relay"), last: time.Now()}
}

// opsObserver feeds the metrics and writes one info line about checkpoints
// every checkpointLogEvery. Its calls come from the settle stage only.
type opsObserver struct {
	*metrics.Metrics
	log               *zap.Logger
	last              time.Time
	published, failed int64
}

var _ relay.Observer = (*opsObserver)(nil)

func (o *opsObserver) Published(t *outbox.Table, exchange string, confirm, sinceCommit time.Duration) {
	o.Metrics.Published(t, exchange, confirm, sinceCommit)
	o.published++
}

func (o *opsObserver) Failed(t *outbox.Table, exchange string, reason error) {
	o.Metrics.Failed(t, exchange, reason)
	o.failed++
}

func (o *opsObserver) Checkpointed(cp checkpoint.Checkpoint) {
	o.Metrics.Checkpointed(cp)
	if since := time.Since(o.last); since >= checkpointLogEvery {
		o.log.Info("checkpoint saved", zap.String("gtid", cp.GTIDSet), zap.String("binlog_file", cp.File),
			zap.Uint32("binlog_pos", cp.Pos), zap.Int64("published", o.published), zap.Int64("failed", o.failed),
			zap.Duration("period", since.Round(time.Second)))
		o.last, o.published, o.failed = time.Now(), 0, 0
	}
}

// Ready reports whether the relay is connected to the source, the broker
// and Redis with its lag under http.ready_max_lag; when not, why. An HA
// standby is ready while it can reach Redis (leader.go).
func (a *App) Ready() (bool, []string) {
	if a.standby() {
		return a.standbyReady()
	}
	var why []string
	r, p := a.ops.reader.Load(), a.ops.pub.Load()
	if r == nil || p == nil {
		return false, []string{"the binlog path is not running yet (start-up checks, or a standby waiting for the lease)"}
	}
	if !r.Connected() {
		why = append(why, "binlog stream from source "+a.sourceAddr()+" is not connected")
	}
	if !p.Connected() {
		why = append(why, "broker "+publisher.Redact(a.Cfg.Broker.URL)+" is not connected")
	}
	if !a.ops.redisUp.Load() {
		why = append(why, "redis "+a.Cfg.Redis.Addr+" does not answer")
	}
	why = append(why, a.replicaReasons(a.Cfg.HTTP.MaxLag())...) // replica.go
	why = append(why, a.gapReasons()...)                        // gap.go
	if lag, max := r.Lag(time.Now()), a.Cfg.HTTP.MaxLag(); lag > max {
		why = append(why, fmt.Sprintf("binlog lag %s is over http.ready_max_lag %s", lag.Round(time.Second), max))
	}
	if h, ok := a.holding(); ok && time.Since(h.Since) > holdGrace {
		why = append(why, relay.HoldReason(h, time.Now()))
	}
	return len(why) == 0, why
}

// holding is what the running relay's stream is held behind, if anything.
func (a *App) holding() (publisher.Hold, bool) {
	if rl := a.Relay(); rl != nil {
		return rl.Holding()
	}
	return publisher.Hold{}, false
}

// heldFor feeds binlog_relay_publish_held_seconds: 0 when not holding (a
// standby holds nothing, whatever its last term left behind).
func (a *App) heldFor() time.Duration {
	if a.standby() {
		return 0
	}
	if h, ok := a.holding(); ok {
		return time.Since(h.Since)
	}
	return 0
}

// httpService serves /metrics, /healthz and /readyz and runs the pollers
// behind the metrics that need a query (backlog on the replica, queue depth,
// Redis). It keeps serving while the binlog path drains and stops after it
// (onStop), so the last scrape sees the final counts.
func (a *App) httpService() service {
	addr, explicit := a.Cfg.HTTP.ListenAddr()
	if addr == "" {
		return nil
	}
	if err := a.Cfg.HTTP.Validate(); err != nil {
		return func(context.Context) error { return err }
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if !explicit {
			// The default port is a convenience; a second relay on the host
			// must not fail over it. A configured address must work.
			a.Log.Warn("metrics and health endpoints are off: the default address is taken; set http.addr (or \"off\")",
				zap.String("addr", addr), zap.Error(err))
			return nil
		}
		return func(context.Context) error { return fmt.Errorf("http.addr: listening on %s: %w", addr, err) }
	}
	bound := ln.Addr().String()
	a.ops.addr.Store(&bound)
	m := a.Metrics()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		code, body := a.readyText() // leader.go
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	})
	mux.HandleFunc("GET /leader", a.serveLeader)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(&zapWriter{a.Log.Named("http")}, "", 0)}
	a.onStop(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		a.ops.addr.Store(nil)
	})
	return func(ctx context.Context) error {
		pollCtx, stopPolls := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, poll := range a.pollers(m) {
			wg.Go(func() { poll(pollCtx) })
		}
		a.Log.Info("metrics and health endpoints listening", zap.String("addr", bound),
			zap.Strings("paths", []string{"/metrics", "/healthz", "/readyz", "/leader"}))
		err := srv.Serve(ln)
		stopPolls()
		wg.Wait()
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serving metrics on %s: %w", bound, err)
	}
}

// pollers are the loops behind the metrics that need a query. The outbox
// backlog and the queue depths are the same whichever relay of a name reads
// them: with ha.enabled only the leader does (leader.go), so standbys add no
// load and the relays of a name do not export N copies of one number.
func (a *App) pollers(m *metrics.Metrics) []func(context.Context) {
	out := []func(context.Context){a.pingRedis}
	for _, poll := range a.backlogPollers(m) {
		out = append(out, func(ctx context.Context) { a.whileLeading(ctx, poll, m.ResetBacklog) })
	}
	return out
}

// backlogPollers read the outbox backlog on the source and, with
// http.queues, the queue depths from the management API.
func (a *App) backlogPollers(m *metrics.Metrics) []func(context.Context) {
	cfg := a.Cfg
	backlog := &metrics.Backlog{DB: a.Source, Tables: cfg.Tables, Interval: cfg.HTTP.Backlog(),
		RatioInterval: cfg.HTTP.RetryRatio(), Metrics: m, Log: a.Log.Named("backlog")}
	out := []func(context.Context){func(ctx context.Context) { _ = backlog.Run(ctx) }}
	if len(cfg.HTTP.Queues) > 0 {
		mgmt, err := cfg.HTTP.Management(cfg.Broker.URL)
		if err != nil {
			a.Log.Warn("queue depth metrics are off", zap.Error(err))
			return out
		}
		tc, err := cfg.Broker.TLS.TLSConfig("broker")
		if err != nil {
			a.Log.Warn("queue depth metrics are off", zap.Error(err))
			return out
		}
		q := &metrics.Queues{URL: mgmt, VHost: cfg.HTTP.QueueVHost(), Names: cfg.HTTP.Queues, Interval: cfg.HTTP.QueuePoll(),
			TLS: tc, Metrics: m, Log: a.Log.Named("queues")}
		out = append(out, func(ctx context.Context) {
			if err := q.Run(ctx); err != nil {
				a.Log.Warn("queue depth metrics are off", zap.Error(err))
			}
		})
	}
	return out
}

// pingRedis probes Redis and logs each change of its state once.
func (a *App) pingRedis(ctx context.Context) {
	tick := time.NewTicker(redisPingEvery)
	defer tick.Stop()
	first := true
	for {
		pctx, cancel := context.WithTimeout(ctx, redisPingEvery)
		err := a.Redis.Ping(pctx).Err()
		cancel()
		if ctx.Err() != nil {
			return
		}
		up := err == nil
		if was := a.ops.redisUp.Swap(up); was != up || first {
			if up {
				a.Log.Info("redis connected", zap.String("addr", a.Cfg.Redis.Addr))
			} else {
				a.Log.Warn("redis does not answer", zap.String("addr", a.Cfg.Redis.Addr), zap.Error(err))
			}
		}
		first = false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// zapWriter sends net/http's own error lines (bad requests, TLS probes) to
// zap at debug: they are about clients, not the relay.
type zapWriter struct{ log *zap.Logger }

func (w *zapWriter) Write(p []byte) (int, error) {
	w.log.Debug(strings.TrimSpace(string(p)))
	return len(p), nil
}

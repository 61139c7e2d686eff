package app

// The HTTP endpoints: /metrics, /healthz, /readyz and /leader.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// HTTPAddr is the address /metrics, /healthz and /readyz listen on; empty
// when the server is off or not started.
func (a *App) HTTPAddr() string {
	if p := a.ops.addr.Load(); p != nil {
		return *p
	}
	return ""
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
		code, body := a.readyText()
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

// zapWriter sends net/http's own error lines (bad requests, TLS probes) to
// zap at debug: they are about clients, not the relay.
type zapWriter struct{ log *zap.Logger }

func (w *zapWriter) Write(p []byte) (int, error) {
	w.log.Debug(strings.TrimSpace(string(p)))
	return len(p), nil
}

// serveLeader answers /leader: 200 on the relay that streams, 503 on the
// others, with who leads in the body.
func (a *App) serveLeader(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if a.leader.is() {
		_, _ = w.Write([]byte("leader\n"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	switch who := a.leaderName(); {
	case !a.Cfg.HA.Enabled:
		_, _ = w.Write([]byte("not leading: the binlog path is not running yet\n"))
	case who != "":
		_, _ = w.Write([]byte("standby: the leader is " + who + "\n"))
	default:
		_, _ = w.Write([]byte("standby: no relay named " + a.Cfg.Name + " holds the lease right now\n"))
	}
}

// readyText is /readyz's status and body.
func (a *App) readyText() (int, string) {
	standby := a.standby()
	ok, why := a.Ready()
	switch {
	case ok && standby:
		if who := a.leaderName(); who != "" {
			return http.StatusOK, "ready: standby, waiting for the lease (the leader is " + who + ")\n"
		}
		return http.StatusOK, "ready: standby, waiting for the lease\n"
	case ok:
		return http.StatusOK, "ready\n"
	}
	return http.StatusServiceUnavailable, "not ready: " + strings.Join(why, "; ") + "\n"
}

package ops

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

// Server serves /metrics, /healthz, /readyz and /leader and runs the
// pollers behind the metrics that need a query.
type Server struct {
	Metrics http.Handler
	Ready   func() (int, string) // /readyz (ReadyText)
	Leader  func() (int, string) // /leader (LeaderText)
	Pollers []func(context.Context)
	// Console, when set, is served at /ui (internal/console); its Close
	// runs at Shutdown, ending its live streams.
	Console interface {
		http.Handler
		Close()
	}
	Log *zap.Logger

	once sync.Once
	srv  *http.Server
}

// Listen binds addr; explicit says it was configured (http.addr). A
// default address that is taken turns the endpoints off with a warning
// (nil, nil): the default port is a convenience, and a second relay on the
// host must not fail over it. A configured address must work.
func Listen(addr string, explicit bool, log *zap.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if !explicit {
		log.Warn("metrics and health endpoints are off: the default address is taken; set http.addr (or \"off\")",
			zap.String("addr", addr), zap.Error(err))
		return nil, nil
	}
	return nil, fmt.Errorf("http.addr: listening on %s: %w", addr, err)
}

// Serve serves on ln, and runs the pollers until ctx ends, until Shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	bound := ln.Addr().String()
	pollCtx, stopPolls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, poll := range s.Pollers {
		wg.Go(func() { poll(pollCtx) })
	}
	paths := []string{"/metrics", "/healthz", "/readyz", "/leader"}
	if s.Console != nil {
		paths = append(paths, "/ui")
	}
	s.Log.Info("metrics and health endpoints listening", zap.String("addr", bound), zap.Strings("paths", paths))
	err := s.server().Serve(ln)
	stopPolls()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serving metrics on %s: %w", bound, err)
}

// Shutdown stops serving, after the requests in progress.
func (s *Server) Shutdown(ctx context.Context) error { return s.server().Shutdown(ctx) }

func (s *Server) server() *http.Server {
	s.once.Do(func() {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.Metrics)
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			write(w, http.StatusOK, "ok\n")
		})
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			code, body := s.Ready()
			write(w, code, body)
		})
		mux.HandleFunc("GET /leader", func(w http.ResponseWriter, _ *http.Request) {
			code, body := s.Leader()
			write(w, code, body)
		})
		s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
			ErrorLog: log.New(&zapWriter{s.Log.Named("http")}, "", 0)}
		if s.Console != nil {
			mux.Handle("/ui", s.Console)
			mux.Handle("/ui/", s.Console)
			s.srv.RegisterOnShutdown(s.Console.Close)
		}
	})
	return s.srv
}

func write(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// zapWriter sends net/http's own error lines (bad requests, TLS probes) to
// zap at debug: they are about clients, not the relay.
type zapWriter struct{ log *zap.Logger }

func (w *zapWriter) Write(p []byte) (int, error) {
	w.log.Debug(strings.TrimSpace(string(p)))
	return len(p), nil
}

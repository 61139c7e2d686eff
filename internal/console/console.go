// Package console is the operator's console the relay serves at /ui on its
// HTTP port (http.console): an overview of the relay, its failure groups
// read from the source replica, and the requeue and replay actions. Pages
// are rendered on the server (html/template) from embedded files, so it
// needs no build step and no network beyond the relay; live parts refresh
// over server-sent events.
//
// Invariants:
//   - Read-only unless a token is configured: without one no action is
//     rendered and every POST but none is refused (403).
//   - An action needs a signed-in session (HttpOnly, SameSite=Strict
//     cookie), the session's CSRF token and a same-origin request; the
//     token is compared in constant time.
//   - The console reads the source replica only, through a cache with one
//     query in flight per kind; it writes the primary only through the
//     requeue action (internal/command's), and replay publishes only.
//   - No secret (the token, a DSN or broker password) is ever rendered: the
//     pages show addresses and names the relay already logs.
package console

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/replay"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Prefix is where the console is served.
const Prefix = "/ui"

//go:embed templates static
var files embed.FS

// Config is the console's part of the relay's config (http.console_*).
type Config struct {
	// Name is the relay's name, in every page's title.
	Name string
	// Token, when set, lets whoever signs in with it act; empty: read-only.
	Token string
	// Payloads shows the rows' payloads (http.console_payloads).
	Payloads bool
	// CacheFor is how long a replica query's result is served before it is
	// asked again (default 3s).
	CacheFor time.Duration
	// Refresh spaces the live updates (default 2s).
	Refresh time.Duration
	// ScanRows bounds the rows a failure-groups query reads per table
	// (default 50,000), PageRows a group's page (default 50) and
	// MaxGroups the groups shown per table (default 100).
	ScanRows, PageRows, MaxGroups int
	// QueryTimeout bounds one replica query (default 10s).
	QueryTimeout time.Duration
}

// Defaults fills the unset fields.
func (c *Config) Defaults() {
	c.CacheFor = cmp.Or(c.CacheFor, 3*time.Second)
	c.Refresh = cmp.Or(c.Refresh, 2*time.Second)
	c.ScanRows = cmp.Or(c.ScanRows, 50000)
	c.PageRows = cmp.Or(c.PageRows, 50)
	c.MaxGroups = cmp.Or(c.MaxGroups, 100)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 10*time.Second)
}

// Actions are the writes the console can ask for: internal/command's
// requeue and replay, over the relay's connections.
type Actions interface {
	Requeue(ctx context.Context, o command.RequeueOptions) (command.RequeueResult, error)
	Replay(ctx context.Context, o command.ReplayOptions, w io.Writer) (*replay.Summary, error)
}

// Deps is what the console reads and acts through.
type Deps struct {
	// Tables enumerates the outbox tables the failures page shows (the one
	// place that does, so table patterns can extend it).
	Tables func() []*outbox.Table
	// Replica is the source replica's pool, read now.
	Replica func() *sql.DB
	// Overview is the relay's state for the overview page.
	Overview func(ctx context.Context) Overview
	// Router routes a row read by SQL the way the relay would (message id,
	// exchange, routing key).
	Router func() (*router.Router, error)
	// Actions runs requeue and replay; nil hides them.
	Actions Actions
	Log     *zap.Logger
}

// Server is the console: an http.Handler for Prefix and below.
type Server struct {
	cfg   Config
	deps  Deps
	log   *zap.Logger
	pages map[string]*template.Template
	mux   *http.ServeMux

	auth    *auth
	queries *queryCache
	audit   *auditLog
	replays *replayRunner

	routerOnce sync.Once
	router     *router.Router
	routerErr  error

	closing chan struct{}
	close   sync.Once
	streams chan struct{} // a slot per live-update stream
}

// maxStreams bounds the live-update streams open at once.
const maxStreams = 32

// New builds the console.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg.Defaults()
	if deps.Log == nil {
		deps.Log = zap.NewNop()
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Log, closing: make(chan struct{}), streams: make(chan struct{}, maxStreams),
		auth: newAuth(cfg.Token), queries: newQueryCache(cfg.CacheFor), audit: &auditLog{}}
	s.replays = &replayRunner{log: deps.Log}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// Close ends the live-update streams (an http.Server's Shutdown waits for
// its handlers, and these do not end on their own) and any replay the
// console started.
func (s *Server) Close() {
	s.close.Do(func() {
		close(s.closing)
		s.replays.stop()
	})
}

// ReadOnly reports whether actions are off (no token).
func (s *Server) ReadOnly() bool { return s.cfg.Token == "" || s.deps.Actions == nil }

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(files, "static")
	m.Handle("GET "+Prefix+"/static/", http.StripPrefix(Prefix+"/static/", http.FileServerFS(static)))
	m.HandleFunc("GET "+Prefix+"/{$}", s.overviewPage)
	m.HandleFunc("GET "+Prefix+"/failures", s.failuresPage)
	m.HandleFunc("GET "+Prefix+"/failures/group", s.groupPage)
	m.HandleFunc("GET "+Prefix+"/actions", s.actionsPage)
	m.HandleFunc("GET "+Prefix+"/events", s.events)
	m.HandleFunc("GET "+Prefix+"/signin", s.signinPage)
	m.HandleFunc("POST "+Prefix+"/signin", s.post(s.signin, false))
	m.HandleFunc("POST "+Prefix+"/signout", s.post(s.signout, true))
	m.HandleFunc("POST "+Prefix+"/actions/requeue", s.post(s.requeue, true))
	m.HandleFunc("POST "+Prefix+"/actions/replay", s.post(s.replay, true))
	m.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusFound)
	})
	s.mux = m
}

// ServeHTTP serves the console with headers that keep its pages out of
// frames and caches and allow only its own scripts and styles.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	s.mux.ServeHTTP(w, r)
}

// routerFor is the relay's router, built once.
func (s *Server) routerFor() (*router.Router, error) {
	s.routerOnce.Do(func() {
		if s.deps.Router == nil {
			return
		}
		s.router, s.routerErr = s.deps.Router()
	})
	return s.router, s.routerErr
}

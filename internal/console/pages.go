package console

// Rendering, and the GET pages: overview, failures, a group's rows, actions.

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
)

var pageNames = []string{"overview", "failures", "group", "actions", "confirm", "result", "signin", "refused"}

var funcs = template.FuncMap{
	"dur": func(d time.Duration) string {
		switch {
		case d <= 0:
			return "0s"
		case d < 10*time.Millisecond:
			return d.Round(10 * time.Microsecond).String()
		case d < time.Second:
			return d.Round(time.Millisecond).String()
		case d < time.Hour:
			return d.Round(time.Second).String()
		}
		return d.Round(time.Minute).String()
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"chart": svgChart,
	"state": func(s string) string {
		if s == outboxsql.StateFailed {
			return "FAILED"
		}
		return "retrying"
	},
	"reason": func(s string) string {
		if s == "" {
			return "(no error text)"
		}
		return s
	},
	"isFailed": func(s string) bool { return s == outboxsql.StateFailed },
}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// page is what every template gets.
type page struct {
	Name     string
	Title    string
	Nav      string
	ReadOnly bool
	SignedIn bool
	Who      string
	CSRF     string
	Live     string // the live part's kind, for the events stream
	Payloads bool
	Stats    []QueryStat
	Data     any
}

func (s *Server) newPage(w http.ResponseWriter, r *http.Request, name string, data any) page {
	sess := s.auth.session(r)
	p := page{Name: s.cfg.Name, Nav: name, ReadOnly: s.ReadOnly(), Payloads: s.cfg.Payloads, Data: data,
		Stats: s.queries.Stats(), CSRF: s.auth.csrfFor(w, r, sess)}
	if sess != nil {
		p.SignedIn, p.Who = true, sess.who
	}
	return p
}

// render writes page name with data.
func (s *Server) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	p := s.newPage(w, r, name, data)
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		s.log.Error("rendering a console page failed", zap.String("page", name), zap.Error(err))
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// refuse answers a request the console will not serve, saying why.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, code int, why string) {
	s.render(w, r, code, "refused", map[string]any{"Code": code, "Why": why})
}

func remote(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func remoteField(r *http.Request) zap.Field { return zap.String("remote", remote(r)) }
func zapWho(who string) zap.Field           { return zap.String("who", who) }

// overviewData is the overview page's Data.
type overviewData struct {
	O             Overview
	Rate, Latency chart
}

func (s *Server) overview(ctx context.Context) overviewData {
	o := Overview{Name: s.cfg.Name, Now: time.Now()}
	if s.deps.Overview != nil {
		o = s.deps.Overview(ctx)
	}
	d := overviewData{O: o}
	d.Rate, d.Latency = charts(o.Recent)
	return d
}

func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "overview", s.overview(r.Context()))
}

func (s *Server) failuresPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "failures", s.failures(r.Context()))
}

// groupData is the group page's Data.
type groupData struct {
	Table   string
	Group   Group
	Found   bool
	Rows    []Row
	Age     time.Duration
	Err     string
	After   string
	Next    string // the id after which the next page starts; "" on the last
	Requeue bool   // the rows can be requeued (FAILED)
}

func (s *Server) groupPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	t := s.table(q.Get("table"))
	if t == nil {
		s.refuse(w, r, http.StatusNotFound, "no such table is configured")
		return
	}
	d := groupData{Table: t.FullName(), After: q.Get("after")}
	g, found, err := s.findGroup(r.Context(), t, q.Get("key"))
	d.Group, d.Found = g, found
	switch {
	case err != nil:
		d.Err = err.Error()
	case found:
		d.Rows, d.Age, err = s.groupRows(r.Context(), t, g, d.After)
		if err != nil {
			d.Err = "reading the group's rows on the source replica failed: " + err.Error()
		}
		if len(d.Rows) == s.cfg.PageRows {
			d.Next = d.Rows[len(d.Rows)-1].ID
		}
		d.Requeue = g.State == outboxsql.StateFailed
	}
	s.render(w, r, http.StatusOK, "group", d)
}

// actionsData is the actions page's Data.
type actionsData struct {
	Tables []TableFailures
	Names  []string
	Replay *ReplayState
	Log    []AuditEntry
}

func (s *Server) actionsPage(w http.ResponseWriter, r *http.Request) {
	d := actionsData{Tables: s.failures(r.Context()), Replay: s.replays.state(), Log: s.audit.entries()}
	for _, t := range s.deps.Tables() {
		d.Names = append(d.Names, t.FullName())
	}
	s.render(w, r, http.StatusOK, "actions", d)
}

// trimmed is a form value without surrounding space, at most n bytes.
func trimmed(r *http.Request, key string, n int) string {
	v := strings.TrimSpace(r.PostForm.Get(key))
	if len(v) > n {
		v = v[:n]
	}
	return v
}

package console

// The actions: requeue a failure group or chosen rows, replay a range to a
// route. Each runs in two steps: a dry run (counted on the replica) shown
// with a confirmation form, then the action itself, which is logged with
// who asked for it. The work is internal/command's requeue and replay.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/command"
	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/replay"
)

// AuditEntry is one action, as the actions page and the log show it.
type AuditEntry struct {
	At     time.Time
	Who    string
	Remote string
	Action string
	Table  string
	What   string
	Rows   int64
	Err    string
}

// keepAudit is how many actions the page lists (the log has them all).
const keepAudit = 50

type auditLog struct {
	mu   sync.Mutex
	list []AuditEntry
}

func (a *auditLog) add(e AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.list = append(a.list, e)
	if len(a.list) > keepAudit {
		a.list = a.list[len(a.list)-keepAudit:]
	}
}

// entries returns the actions, newest first.
func (a *auditLog) entries() []AuditEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]AuditEntry, len(a.list))
	for i, e := range a.list {
		out[len(a.list)-1-i] = e
	}
	return out
}

// record logs an action and keeps it for the page.
func (s *Server) record(e AuditEntry) {
	s.audit.add(e)
	fields := []zap.Field{zapWho(e.Who), zap.String("remote", e.Remote), zap.String("action", e.Action),
		zap.String("table", e.Table), zap.String("what", e.What), zap.Int64("rows", e.Rows)}
	if e.Err != "" {
		s.log.Warn("console action failed", append(fields, zap.String("error", e.Err))...)
		return
	}
	s.log.Info("console action", fields...)
}

// confirmData is the confirmation page's Data: what the dry run found and
// the form that does it.
type confirmData struct {
	Action  string // "requeue" or "replay"
	Table   string
	What    string
	Rows    int64
	Samples []replay.Sample
	Fields  [][2]string // the hidden fields the confirmation sends back
	Err     string
}

// resultData is the result page's Data.
type resultData struct {
	Action string
	Table  string
	What   string
	Rows   int64
	Err    string
	Back   string
}

// maxIDs bounds the rows one requeue of chosen rows names.
const maxIDs = 500

// validID refuses ids that are not plain keys (they go into a query as
// arguments, but also onto the page and into the log).
func validID(id string) bool {
	return id != "" && len(id) <= 64 && strings.IndexFunc(id, func(r rune) bool {
		return !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.:", r))
	}) < 0
}

// requeue is POST /ui/actions/requeue: table, and a group's key or ids;
// step "preview" (the default) counts, "confirm" requeues.
func (s *Server) requeue(w http.ResponseWriter, r *http.Request, sess *session) {
	t := s.table(trimmed(r, "table", 200))
	if t == nil {
		s.refuse(w, r, http.StatusBadRequest, "no such table is configured")
		return
	}
	o := command.RequeueOptions{Failed: true, Table: t.FullName()}
	fields := [][2]string{{"table", t.FullName()}}
	var what string
	if key := trimmed(r, "key", 100); key != "" {
		g, found, err := s.findGroup(r.Context(), t, key)
		switch {
		case err != nil:
			s.refuse(w, r, http.StatusServiceUnavailable, err.Error())
			return
		case !found:
			s.render(w, r, http.StatusOK, "result", resultData{Action: "requeue", Table: t.FullName(),
				Err: "this group has no rows now (requeued, sent, or retried into another reason): nothing to requeue", Back: Prefix + "/failures"})
			return
		case g.State != outboxsql.StateFailed:
			s.refuse(w, r, http.StatusBadRequest, "only FAILED rows are requeued: retrying rows are sent again by the relay at their next retry")
			return
		}
		if t.Columns.Error != "" {
			o.Error = &g.Error
		}
		fields = append(fields, [2]string{"key", key})
		what = "the FAILED group: " + reasonText(g.Error)
	} else {
		for _, id := range r.PostForm["id"] {
			id = strings.TrimSpace(id)
			if !validID(id) {
				s.refuse(w, r, http.StatusBadRequest, "a row id is not a plain key")
				return
			}
			o.IDs = append(o.IDs, id)
			fields = append(fields, [2]string{"id", id})
		}
		if len(o.IDs) == 0 || len(o.IDs) > maxIDs {
			s.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("choose between 1 and %d rows, or a group", maxIDs))
			return
		}
		what = fmt.Sprintf("%d chosen FAILED rows (ids %s)", len(o.IDs), strings.Join(o.IDs, ", "))
	}
	if r.PostForm.Get("step") != "confirm" {
		o.DryRun = true
		res, err := s.deps.Actions.Requeue(r.Context(), o)
		d := confirmData{Action: "requeue", Table: t.FullName(), What: what, Rows: res.Rows, Fields: fields}
		if err != nil {
			d.Err = err.Error()
		}
		s.render(w, r, http.StatusOK, "confirm", d)
		return
	}
	res, err := s.deps.Actions.Requeue(r.Context(), o)
	e := AuditEntry{At: time.Now(), Who: sess.who, Remote: remote(r), Action: "requeue", Table: t.FullName(), What: what, Rows: res.Rows}
	if err != nil {
		e.Err = err.Error()
	}
	s.record(e)
	s.queries.forget("groups:" + t.FullName())
	s.queries.forget("rows:" + t.FullName() + ":")
	s.render(w, r, http.StatusOK, "result", resultData{Action: "requeue", Table: t.FullName(), What: what, Rows: res.Rows, Err: e.Err,
		Back: Prefix + "/failures"})
}

func reasonText(s string) string {
	if s == "" {
		return "(no error text)"
	}
	if r := []rune(s); len(r) > 120 {
		return string(r[:120]) + "…"
	}
	return s
}

// replayOptions reads the replay form.
func (s *Server) replayOptions(r *http.Request) (command.ReplayOptions, [][2]string, string, error) {
	t := s.table(trimmed(r, "table", 200))
	if t == nil {
		return command.ReplayOptions{}, nil, "", fmt.Errorf("no such table is configured")
	}
	o := command.ReplayOptions{Table: t.FullName(), ChunkSize: 1000, Samples: 5, ProgressEvery: 10 * time.Second, Rate: 1000}
	fields := [][2]string{{"table", t.FullName()}}
	now := time.Now()
	var parts []string
	for _, f := range []struct {
		key  string
		into *time.Time
	}{{"since", &o.Range.Since}, {"until", &o.Range.Until}} {
		if v := trimmed(r, f.key, 64); v != "" {
			tm, err := command.ParseSince(v, now)
			if err != nil {
				return o, nil, "", fmt.Errorf("%s: %w", f.key, err)
			}
			*f.into = tm
			// The confirmation carries the time itself: "2h" would move.
			fields = append(fields, [2]string{f.key, tm.UTC().Format(time.RFC3339Nano)})
		}
	}
	if v := trimmed(r, "ids", 64); v != "" {
		ids, err := replay.ParseIDs(v)
		if err != nil {
			return o, nil, "", fmt.Errorf("ids: %w", err)
		}
		o.Range.IDs = &ids
		fields = append(fields, [2]string{"ids", v})
	}
	if o.Range.Since.IsZero() && o.Range.IDs == nil {
		return o, nil, "", fmt.Errorf("give a range: since (a time or a duration back, like 2h) or ids (A-B)")
	}
	if v := trimmed(r, "exchange", 255); v != "" {
		o.Exchange = v
		fields = append(fields, [2]string{"exchange", v})
	}
	if v := trimmed(r, "routing_key", 255); v != "" {
		o.RoutingKey = v
		fields = append(fields, [2]string{"routing_key", v})
	}
	if v := trimmed(r, "rate", 32); v != "" {
		rate, err := replay.ParseRate(v)
		if err != nil {
			return o, nil, "", fmt.Errorf("rate: %w", err)
		}
		o.Rate = rate
		fields = append(fields, [2]string{"rate", v})
	}
	if err := o.Validate(); err != nil {
		return o, nil, "", err
	}
	parts = append(parts, o.Range.Describe())
	dest := "their own exchanges and routing keys"
	if o.Exchange != "" || o.RoutingKey != "" {
		dest = fmt.Sprintf("exchange %q, routing key %q", o.Exchange, o.RoutingKey)
	}
	parts = append(parts, "to "+dest, "at "+strconv.FormatFloat(o.Rate, 'f', -1, 64)+" messages/s")
	return o, fields, strings.Join(parts, ", "), nil
}

// replay is POST /ui/actions/replay: a dry run and its confirmation, then
// the replay in the background (one at a time).
func (s *Server) replay(w http.ResponseWriter, r *http.Request, sess *session) {
	o, fields, what, err := s.replayOptions(r)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, "replay: "+err.Error())
		return
	}
	if r.PostForm.Get("step") != "confirm" {
		o.DryRun = true
		sum, err := s.deps.Actions.Replay(r.Context(), o, io.Discard)
		d := confirmData{Action: "replay", Table: o.Table, What: what, Fields: fields}
		if sum != nil {
			d.Rows, d.Samples = sum.Total, sum.Samples
		}
		if err != nil {
			d.Err = err.Error()
		}
		s.render(w, r, http.StatusOK, "confirm", d)
		return
	}
	e := AuditEntry{At: time.Now(), Who: sess.who, Remote: remote(r), Action: "replay", Table: o.Table, What: what}
	if err := s.replays.start(s, o, e); err != nil {
		s.refuse(w, r, http.StatusConflict, err.Error())
		return
	}
	http.Redirect(w, r, Prefix+"/actions", http.StatusSeeOther)
}

// ReplayState is the console's replay, running or done.
type ReplayState struct {
	Who     string
	Table   string
	What    string
	Started time.Time
	Running bool
	Summary *replay.Summary
	Err     string
}

// replayRunner runs one replay at a time, beyond the request that asked.
type replayRunner struct {
	log *zap.Logger

	mu     sync.Mutex
	cur    *ReplayState
	cancel context.CancelFunc
	done   chan struct{}
}

func (rr *replayRunner) start(s *Server, o command.ReplayOptions, e AuditEntry) error {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.cur != nil && rr.cur.Running {
		return fmt.Errorf("a replay is running (%s, started by %s): wait for it to end", rr.cur.What, rr.cur.Who)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &ReplayState{Who: e.Who, Table: o.Table, What: e.What, Started: time.Now(), Running: true}
	rr.cur, rr.cancel, rr.done = st, cancel, make(chan struct{})
	s.record(AuditEntry{At: e.At, Who: e.Who, Remote: e.Remote, Action: "replay started", Table: e.Table, What: e.What})
	done := rr.done
	go func() {
		defer close(done)
		sum, err := s.deps.Actions.Replay(ctx, o, io.Discard)
		rr.mu.Lock()
		st.Running, st.Summary = false, sum
		if err != nil {
			st.Err = err.Error()
		}
		rr.mu.Unlock()
		end := AuditEntry{At: time.Now(), Who: e.Who, Remote: e.Remote, Action: "replay ended", Table: e.Table, What: e.What, Err: st.Err}
		if sum != nil {
			end.Rows = sum.Published
		}
		s.record(end)
	}()
	return nil
}

func (rr *replayRunner) state() *ReplayState {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.cur == nil {
		return nil
	}
	cp := *rr.cur
	return &cp
}

// stop interrupts a running replay (it saves its progress: `replay
// --resume` continues it) and waits for it.
func (rr *replayRunner) stop() {
	rr.mu.Lock()
	cancel, done := rr.cancel, rr.done
	rr.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

package console

// Live updates: GET /ui/events?page=overview|failures streams the page's
// live part, rendered on the server, as server-sent events every Refresh.
// The failures part reads through the query cache, so streams add no
// replica load past one query per CacheFor.

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"time"
)

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	kind := r.URL.Query().Get("page")
	if kind != "overview" && kind != "failures" {
		http.Error(w, "page: overview or failures", http.StatusBadRequest)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		http.Error(w, "too many live pages open; reload later", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // nginx in front: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", (2 * s.cfg.Refresh).Milliseconds())
	flusher.Flush()
	tick := time.NewTicker(s.cfg.Refresh)
	defer tick.Stop()
	for {
		var data any
		if kind == "overview" {
			data = s.overview(r.Context())
		} else {
			data = s.failures(r.Context())
		}
		p := s.newPage(w, r, kind, data)
		var buf bytes.Buffer
		if err := s.pages[kind].ExecuteTemplate(&buf, kind+"-live", p); err != nil {
			return
		}
		var ev strings.Builder
		ev.WriteString("event: live\n")
		for _, line := range strings.Split(buf.String(), "\n") {
			ev.WriteString("data: " + strings.TrimRight(line, "\r") + "\n")
		}
		ev.WriteString("\n")
		if _, err := w.Write([]byte(ev.String())); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-tick.C:
		}
	}
}

package app

// Tenants: the tables of pattern entries that come, go and are refused
// while the relay streams (pkg/binlog's TableObserver). The sweeper
// follows them, the metrics count them per entry, and /readyz names a
// refused one without making the relay unready: the other tenants flow.

import (
	"fmt"
	"sort"
	"sync"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// tenants is the App's binlog.TableObserver.
type tenants struct {
	a *App

	mu      sync.Mutex
	live    map[string]*outbox.Table // added while streaming, not dropped, by schema.name
	gone    map[string]bool          // dropped while streaming (matched at start or since)
	refused map[string]string        // schema.name -> why
	sweeper *sweeper.Sweeper         // the one running in this process, if any
}

func (tn *tenants) init(a *App) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if tn.live == nil {
		tn.a, tn.live, tn.refused, tn.gone = a, map[string]*outbox.Table{}, map[string]string{}, map[string]bool{}
	}
}

// TableAdded: a matching table appeared in the stream.
func (tn *tenants) TableAdded(t *outbox.Table) {
	tn.mu.Lock()
	tn.live[t.FullName()] = t
	delete(tn.refused, t.FullName())
	delete(tn.gone, t.FullName())
	sw := tn.sweeper
	tn.mu.Unlock()
	if sw != nil {
		sw.AddTable(t)
	}
	tn.a.Metrics().TableChange(outbox.EntryOf(t).FullName(), "added")
	tn.publishCounts()
}

// TableDropped: a matched table is gone.
func (tn *tenants) TableDropped(t *outbox.Table) {
	tn.mu.Lock()
	delete(tn.live, t.FullName())
	delete(tn.refused, t.FullName())
	tn.gone[t.FullName()] = true
	sw := tn.sweeper
	tn.mu.Unlock()
	if sw != nil {
		sw.RemoveTable(t)
	}
	tn.a.Metrics().TableChange(outbox.EntryOf(t).FullName(), "dropped")
	tn.publishCounts()
}

// TableRefused: a matched table's rows are skipped.
func (tn *tenants) TableRefused(schema, name string, reason error) {
	full := schema + "." + name
	tn.mu.Lock()
	tn.refused[full] = reason.Error()
	t := tn.live[full]
	sw := tn.sweeper
	tn.mu.Unlock()
	if sw != nil && t != nil {
		// Its rows cannot be read as the entry maps them: sweeping them
		// would fail the same way.
		sw.RemoveTable(t)
	}
	entry := "(two entries)"
	if m := tn.a.Matcher(); m != nil {
		if i, err := m.Entry(schema, name); err == nil && i >= 0 {
			entry = m.Entries()[i].FullName()
		}
	}
	tn.a.Metrics().TableChange(entry, "refused")
	tn.a.Log.Error("outbox table refused", zap.String("table", full), zap.String("entry", entry), zap.Error(reason))
	tn.publishCounts()
}

// follow has s sweep the tables added so far, and those added later.
func (tn *tenants) follow(s *sweeper.Sweeper) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.sweeper = s
	if s == nil {
		return
	}
	s.FollowTables()
	for _, t := range tn.live {
		s.AddTable(t)
	}
}

// current are the outbox tables now: those listed at start not dropped
// since, and those added while streaming.
func (tn *tenants) current() []*outbox.Table {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	var out []*outbox.Table
	seen := map[string]bool{}
	for _, t := range tn.a.Cfg.Tables {
		if !tn.gone[t.FullName()] {
			out = append(out, t)
			seen[t.FullName()] = true
		}
	}
	for n, t := range tn.live {
		if !seen[n] {
			out = append(out, t)
		}
	}
	return out
}

// notes are /readyz's words about refused tables (at most 5 named).
func (tn *tenants) notes() []string {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if len(tn.refused) == 0 {
		return nil
	}
	names := make([]string, 0, len(tn.refused))
	for n := range tn.refused {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	for i, n := range names {
		if i == 5 {
			out = append(out, fmt.Sprintf("and %d more tables refused", len(names)-5))
			break
		}
		out = append(out, fmt.Sprintf("table %s refused, its rows are not published (the other tables flow): %s", n, tn.refused[n]))
	}
	return out
}

// publishCounts sets the per-entry gauges: the tables matched at start
// and since, and those refused.
func (tn *tenants) publishCounts() {
	m := tn.a.Matcher()
	if m == nil {
		return
	}
	matched, refused := map[string]int{}, map[string]int{}
	tn.mu.Lock()
	names := map[string]bool{}
	for _, t := range tn.a.Cfg.Tables {
		if t.Entry != nil && !tn.gone[t.FullName()] {
			names[t.FullName()] = true
			matched[t.Entry.FullName()]++
		}
	}
	for n, t := range tn.live {
		if !names[n] {
			matched[outbox.EntryOf(t).FullName()]++
		}
	}
	for n := range tn.refused {
		if t := tn.live[n]; t != nil {
			refused[outbox.EntryOf(t).FullName()]++
		}
	}
	tn.mu.Unlock()
	for _, e := range m.Entries() {
		if e.IsPattern() {
			tn.a.Metrics().TablesMatched(e.FullName(), matched[e.FullName()], refused[e.FullName()])
		}
	}
}

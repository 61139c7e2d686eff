package app

// The outbox tables the relay reads: the entries under tables:, with each
// pattern entry replaced by the tables of the source it matches now
// (internal/tablematch). Run, Check and the one-shot commands read them
// once, before anything else uses Cfg.Tables; while the relay streams,
// the binlog reader meets the tables created (or renamed into a match)
// after, and the wiring adds them to the stages (tenants.go).

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/tablematch"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// tableSet is the App's view of its entries and the tables they matched.
type tableSet struct {
	entries []*outbox.Table // tables: as configured
	matcher *tablematch.Matcher
	catalog *tablematch.Catalog
}

// ResolveTables reads which tables the pattern entries under tables: match
// on the source, once, and puts them in Cfg.Tables. Without a pattern
// entry it changes nothing and asks nothing but the source's
// lower_case_table_names.
func (a *App) ResolveTables(ctx context.Context) error {
	a.tablesMu.Lock()
	defer a.tablesMu.Unlock()
	if a.tables.matcher != nil {
		return nil
	}
	if a.tables.entries == nil {
		a.tables.entries = a.Cfg.Tables
	}
	lctn := 0
	hasPattern := false
	for _, t := range a.tables.entries {
		hasPattern = hasPattern || t.IsPattern()
	}
	if hasPattern {
		var err error
		if lctn, err = binlog.DetectLowerCaseTableNames(ctx, a.Source.DB()); err != nil {
			return fmt.Errorf("source: %w", err)
		}
	}
	m, err := tablematch.New(a.tables.entries, lctn)
	if err != nil {
		return err
	}
	cat, err := m.Read(ctx, a.Source.DB())
	if err != nil {
		return err
	}
	a.tables.matcher, a.tables.catalog = m, cat
	a.Cfg.Tables = cat.Tables
	for _, e := range a.tables.entries {
		if e.IsPattern() {
			a.wire.patterns = append(a.wire.patterns, e)
		}
	}
	if m.HasPatterns() {
		a.tenants.init(a)
		a.wire.matcher, a.wire.observer = m, &a.tenants
	}
	for i, e := range a.tables.entries {
		if e.IsPattern() {
			a.Log.Info("pattern entry matched tables", zap.Int("entry", i), zap.String("pattern", e.FullName()),
				zap.Int("tables", len(cat.Matched[i])))
		}
	}
	return nil
}

// Matcher is the matcher of the entries under tables: (nil before
// ResolveTables).
func (a *App) Matcher() *tablematch.Matcher {
	a.tablesMu.Lock()
	defer a.tablesMu.Unlock()
	return a.tables.matcher
}

// checkPatterns reports what each pattern entry matched: a pattern that
// matches nothing is only a warning (a fleet may start empty: tenants
// created later are picked up from the binlog).
func (a *App) checkPatterns(r *preflight.Report) {
	a.tablesMu.Lock()
	defer a.tablesMu.Unlock()
	if a.tables.catalog == nil {
		return
	}
	for i, e := range a.tables.entries {
		if !e.IsPattern() {
			continue
		}
		where := fmt.Sprintf("tables[%d] %s", i, e.FullName())
		matched := a.tables.catalog.Matched[i]
		if len(matched) == 0 {
			r.Add(preflight.Warning, where, "the pattern matches no table on the source now; tables created later that match are read from the binlog as they appear")
			continue
		}
		r.Add(preflight.Info, where, "the pattern matches %d table(s): %s", len(matched), listNames(matched, 10))
	}
}

// listNames names up to n tables, and says how many more.
func listNames(ts []*outbox.Table, n int) string {
	var names []string
	for i, t := range ts {
		if i == n {
			names = append(names, fmt.Sprintf("and %d more", len(ts)-n))
			break
		}
		names = append(names, t.FullName())
	}
	return strings.Join(names, ", ")
}

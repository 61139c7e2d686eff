package binlog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Tables that appear while streaming. A reader built WithTableMatcher
// asks the matcher about every table it meets in the binlog that the list
// given to New does not name: a table a pattern entry matches (a tenant's
// outbox created after the relay started, or renamed into a match) is read
// from its first rows event on, whatever DDL came before it. The match
// depends on the name alone, so the parser goroutine (decodeRows) and the
// stream agree on it without coordination: no row of a matching table is
// skipped at decode, which is what makes a new tenant gap-free (its first
// row, even inserted in the same second or transaction group as its
// CREATE, is published).
//
// The DDL the stream passes (tableddl.go) tells a TableObserver about the
// tables that come and go, so the stages beside the binlog path (the
// sweeper) follow them too. A table whose columns do not fit its entry's
// mapping is refused alone: its rows are skipped, the observer told, and
// the next DDL naming it (an ALTER, a DROP and CREATE) has it checked
// again; every other table flows.

// A TableMatcher finds the outbox table the source calls schema.name when
// New's list does not name it: a table a pattern entry matches (with
// outbox.Table.Entry set), nil for a table that is no outbox table. An
// error (two entries match) refuses that table alone.
type TableMatcher interface {
	Table(schema, name string) (*outbox.Table, error)
}

// A TableObserver hears about the tables a TableMatcher matched, in binlog
// order, on the reader's goroutine: calls must not block.
type TableObserver interface {
	// TableAdded: the stream met a matching table New's list does not
	// name (created, renamed into a match, or first written).
	TableAdded(t *outbox.Table)
	// TableDropped: a matched table was dropped (DROP TABLE, DROP
	// DATABASE) or renamed away from the name that matched.
	TableDropped(t *outbox.Table)
	// TableRefused: a matched table cannot be read (its columns do not
	// fit the entry's mapping, or two entries match it); its rows are
	// skipped until DDL changes it.
	TableRefused(schema, name string, reason error)
}

// WithTableMatcher has the reader read, besides the tables given to New,
// every table m matches as the stream meets it, and tell o (may be nil)
// about those that come, go and are refused.
func WithTableMatcher(m TableMatcher, o TableObserver) Option {
	return func(r *Reader) { r.matcher, r.observer = m, o }
}

// errMisfit marks a matched table whose columns do not fit its entry.
var errMisfit = errors.New("the table's columns do not fit the entry's mapping")

// outboxTable is the outbox table the source calls schema.table, nil for
// any other: a table New's list names, or one the matcher matches
// (remembered, so each name is matched once).
func (r *Reader) outboxTable(schema, table string) *outbox.Table {
	id := r.tableID(schema, table)
	r.tablesMu.RLock()
	t, known := r.tables[id]
	r.tablesMu.RUnlock()
	if known || r.matcher == nil {
		return t
	}
	t, err := r.matcher.Table(schema, table)
	r.tablesMu.Lock()
	defer r.tablesMu.Unlock()
	if had, ok := r.tables[id]; ok {
		return had // matched meanwhile by the other goroutine
	}
	if err != nil {
		r.refusedErr[id] = err
		t = nil
	}
	r.tables[id] = t
	if t != nil {
		r.tableIndex[t] = len(r.tableList)
		r.tableList = append(r.tableList, t)
		r.added[id] = true // announced by the stream (announce)
	}
	return t
}

// announce tells the observer once about a matched table the stream met,
// and about one refused because two entries match it.
func (s *stream) announce(schema, table string) {
	r := s.r
	id := r.tableID(schema, table)
	r.tablesMu.Lock()
	t := r.tables[id]
	isNew := r.added[id]
	delete(r.added, id)
	collision := r.refusedErr[id]
	if collision != nil {
		delete(r.refusedErr, id)
		r.refused[id] = collision
	}
	r.tablesMu.Unlock()
	if collision != nil {
		r.log.Error("a table two entries match is not read: narrow a pattern", "table", schema+"."+table, "error", collision)
		if r.observer != nil {
			r.observer.TableRefused(schema, table, collision)
		}
	}
	if isNew && t != nil {
		r.log.Info("outbox table matched by a pattern entry: reading it from here", "table", t.FullName(),
			"entry", outbox.EntryOf(t).FullName(), "binlog_file", s.tracker.file, "binlog_pos", s.lastPos)
		if r.observer != nil {
			r.observer.TableAdded(t)
		}
	}
}

// refusedTable reports whether the rows of schema.table are skipped.
func (r *Reader) refusedTable(id tableID) bool {
	r.tablesMu.RLock()
	defer r.tablesMu.RUnlock()
	return r.refused[id] != nil
}

// refuse skips a matched table's rows from here, loudly.
func (s *stream) refuse(t *outbox.Table, reason error) {
	r := s.r
	id := r.tableID(t.Schema, t.Name)
	r.tablesMu.Lock()
	r.refused[id] = reason
	r.tablesMu.Unlock()
	r.log.Error("outbox table refused: its rows are not published until DDL changes it; the other tables flow",
		"table", t.FullName(), "entry", outbox.EntryOf(t).FullName(), "error", reason,
		"binlog_file", s.tracker.file, "binlog_pos", s.lastPos)
	if r.observer != nil {
		r.observer.TableRefused(t.Schema, t.Name, reason)
	}
}

// forget drops what the reader knows of a name (a DDL changed or removed
// the table): matched again, checked again at its next rows. It returns
// the matched table that had the name, if any.
func (r *Reader) forget(id tableID) *outbox.Table {
	r.tablesMu.Lock()
	defer r.tablesMu.Unlock()
	t := r.tables[id]
	delete(r.refused, id)
	delete(r.refusedErr, id)
	if t == nil || t.Entry == nil {
		// A table New's list names stays; an unmatched name is matched
		// again (cheap).
		if t == nil {
			delete(r.tables, id)
		}
		return nil
	}
	delete(r.tables, id)
	delete(r.added, id)
	r.layoutMu.Lock()
	delete(r.layouts, id)
	r.layoutMu.Unlock()
	return t
}

// recheck has a name's table checked again at its next rows (a DDL
// created or changed it): a refusal ends, a collision is matched again.
// The table itself stays: rows the parser already decoded by it are read.
func (r *Reader) recheck(id tableID) {
	r.tablesMu.Lock()
	if _, was := r.refused[id]; was && r.tables[id] != nil {
		// Announced again at its next rows: the observer learns it is
		// read again.
		r.added[id] = true
	}
	delete(r.refused, id)
	if t, ok := r.tables[id]; ok && t == nil {
		delete(r.tables, id)
		delete(r.refusedErr, id)
	}
	r.tablesMu.Unlock()
	r.layoutMu.Lock()
	delete(r.layouts, id)
	r.layoutMu.Unlock()
}

// checkFit refuses a matched table missing a column its entry maps.
func checkFit(t *outbox.Table, names []string) error {
	have := map[string]bool{}
	for _, n := range names {
		have[strings.ToLower(n)] = true
	}
	var missing []string
	for _, c := range neededColumns(t) {
		if !have[strings.ToLower(c)] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s has no column %s", errMisfit, t.FullName(), strings.Join(missing, ", "))
	}
	return nil
}

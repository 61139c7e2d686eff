package binlog

import (
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The DDL that makes tables come and go, for a reader WithTableMatcher
// (tables.go). Rows are read by name whatever DDL the stream saw: this is
// what the stages beside the binlog path learn (the sweeper sweeps a new
// tenant, and stops sweeping a dropped one), and what makes a refused
// table checked again.
//
//   - CREATE TABLE [IF NOT EXISTS] t (... | LIKE ...): a matching t is
//     added.
//   - DROP TABLE[S] [IF EXISTS] a, b: each dropped; DROP DATABASE|SCHEMA
//     s: every matched table of s dropped.
//   - RENAME TABLE a TO b / ALTER TABLE a RENAME TO b: b added when it
//     matches; a dropped when it matched and nothing took its name in the
//     same statement (the rename tracker follows where a's rows went, for
//     their marks).
//   - ALTER TABLE t (anything else): a refused t is checked again at its
//     next rows.
//
// CREATE DATABASE needs nothing: a schema without tables has no rows.

// ddlKind is what a statement does to tables.
type ddlKind uint8

const (
	ddlNone ddlKind = iota
	ddlCreate
	ddlDrop
	ddlDropSchema
	ddlAlter
)

// parseTableDDL reads the tables a CREATE TABLE, DROP TABLE, DROP
// DATABASE or ALTER TABLE names (schema is the statement's default).
func parseTableDDL(schema, query string) (kind ddlKind, names []renamePair) {
	p := renameParser{toks: tokens(query), schema: schema}
	i := 1
	switch {
	case p.kw(0, "CREATE"):
		for p.kw(i, "OR", "REPLACE", "TEMPORARY") {
			i++
		}
		if !p.kw(i, "TABLE") {
			return ddlNone, nil
		}
		i++
		if p.kw(i, "IF") && p.kw(i+1, "NOT") && p.kw(i+2, "EXISTS") {
			i += 3
		}
		if s, n, _, ok := p.name(i); ok {
			return ddlCreate, []renamePair{{toSchema: s, to: n}}
		}
	case p.kw(0, "DROP"):
		if p.kw(1, "DATABASE", "SCHEMA") {
			i = 2
			if p.kw(i, "IF") && p.kw(i+1, "EXISTS") {
				i += 2
			}
			if i < len(p.toks) {
				return ddlDropSchema, []renamePair{{fromSchema: p.toks[i].text}}
			}
			return ddlNone, nil
		}
		if p.kw(i, "TEMPORARY") {
			i++
		}
		if !p.kw(i, "TABLE", "TABLES") {
			return ddlNone, nil
		}
		i++
		if p.kw(i, "IF") && p.kw(i+1, "EXISTS") {
			i += 2
		}
		for {
			s, n, next, ok := p.name(i)
			if !ok {
				break
			}
			names = append(names, renamePair{fromSchema: s, from: n})
			if next >= len(p.toks) || p.toks[next].text != "," {
				break
			}
			i = next + 1
		}
		if len(names) > 0 {
			return ddlDrop, names
		}
	case p.kw(0, "ALTER"):
		for p.kw(i, "ONLINE", "IGNORE") {
			i++
		}
		if !p.kw(i, "TABLE") {
			return ddlNone, nil
		}
		i++
		if p.kw(i, "IF") && p.kw(i+1, "EXISTS") {
			i += 2
		}
		if s, n, _, ok := p.name(i); ok {
			return ddlAlter, []renamePair{{fromSchema: s, from: n}}
		}
	}
	return ddlNone, nil
}

// tableDDL follows a statement's tables for the matcher and observer.
func (s *stream) tableDDL(ev *replication.BinlogEvent, schema, query string) {
	r := s.r
	if r.matcher == nil {
		return
	}
	if pairs, ok := parseRenames(schema, query); ok {
		refilled := map[tableID]bool{}
		for _, p := range pairs {
			refilled[r.tableID(p.toSchema, p.to)] = true
		}
		for _, p := range pairs {
			if from := r.tableID(p.fromSchema, p.from); !refilled[from] {
				s.dropped(from)
			}
			r.recheck(r.tableID(p.toSchema, p.to))
			if t := r.outboxTable(p.toSchema, p.to); t != nil {
				s.announce(p.toSchema, p.to)
			}
		}
		return
	}
	kind, names := parseTableDDL(schema, query)
	switch kind {
	case ddlCreate:
		n := names[0]
		r.recheck(r.tableID(n.toSchema, n.to))
		if r.outboxTable(n.toSchema, n.to) != nil {
			s.announce(n.toSchema, n.to)
		}
	case ddlDrop:
		for _, n := range names {
			s.dropped(r.tableID(n.fromSchema, n.from))
		}
	case ddlDropSchema:
		db := r.tableID(names[0].fromSchema, "").Schema
		var ids []tableID
		r.tablesMu.RLock()
		for id, t := range r.tables {
			if id.Schema == db && t != nil && t.Entry != nil {
				ids = append(ids, id)
			}
		}
		r.tablesMu.RUnlock()
		for _, id := range ids {
			s.dropped(id)
		}
	case ddlAlter:
		id := r.tableID(names[0].fromSchema, names[0].from)
		if r.refusedTable(id) {
			r.recheck(id)
			r.log.Info("a refused outbox table was altered: checked again at its next rows", "table", id.String(),
				"binlog_file", s.tracker.file, "binlog_pos", ev.Header.LogPos)
		}
	}
}

// dropped retires a matched table that no longer has its name.
func (s *stream) dropped(id tableID) {
	r := s.r
	t := r.forget(id)
	if t == nil {
		return
	}
	s.syncRenames()
	s.renames.Retire(r.indexOf(t))
	r.log.Info("outbox table matched by a pattern entry is gone: nothing more is read or swept from it", "table", t.FullName(),
		"entry", outbox.EntryOf(t).FullName(), "binlog_file", s.tracker.file, "binlog_pos", s.lastPos)
	if r.observer != nil {
		r.observer.TableDropped(t)
	}
}

package binlog

import (
	"context"
	"strings"
	"unicode"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/internal/tablerename"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Rename says that an outbox table's rows moved: a RENAME TABLE (or ALTER
// TABLE ... RENAME) took the table holding them away from the configured
// name, moved it again, or brought it back. The rows concerned now live in
// Schema.Name; marks, retries and failures of those rows go there and,
// when Replaced, under the configured name as well, matched by message id
// (a row of another message there is left alone).
//
// The rows read under the configured name up to a rename that takes their
// table away are one generation, numbered per table from 1. A Rename with
// Earlier unset starts a generation: the rows read under the configured
// name until this event. One with Earlier set is about an earlier
// generation (internal/tablerename says which statements make which).
type Rename struct {
	Table        *outbox.Table
	Schema, Name string
	// Replaced: another table holds the configured name now, renamed in by
	// the same statement or, for an earlier generation, by a later one (a
	// two-step cut-over's second statement). That table may be an empty
	// one (archival by "RENAME TABLE t TO t_2026_11, t_new TO t") or a copy
	// holding the same rows, same ids and message ids (an online schema
	// change's cut-over: gh-ost's "t TO _t_del, _t_gho TO t",
	// pt-online-schema-change's "t TO _t_old, _t_new TO t"); a status
	// write matched by message id is right for both.
	Replaced bool
	// Generation numbers the rows concerned; Earlier says they are those
	// of an earlier generation, not the rows read since the last rename.
	Generation uint64
	Earlier    bool
}

// Back reports whether the rename brought an earlier generation's rows
// back under the configured name ("RENAME TABLE t TO t_tmp", then "RENAME
// TABLE t_tmp TO t"): they are read and marked there again.
func (r *Rename) Back() bool {
	return r.Earlier && r.Schema == r.Table.Schema && r.Name == r.Table.Name
}

// renamePair is one "from TO to" of a rename statement, schema-qualified.
type renamePair struct{ fromSchema, from, toSchema, to string }

// parseRenames reads the table renames of a statement: RENAME TABLE[S] [IF
// EXISTS] a [WAIT n|NOWAIT] TO b [, c TO d ...], and ALTER [ONLINE|IGNORE]
// TABLE a ... RENAME [TO|AS] b (with or without other clauses). schema is
// the statement's default schema. ok is false for any other statement.
func parseRenames(schema, query string) (pairs []renamePair, ok bool) {
	p := renameParser{toks: tokens(query), schema: schema}
	switch {
	case p.kw(0, "RENAME") && p.kw(1, "TABLE", "TABLES"):
		return p.renameTable()
	case p.kw(0, "ALTER"):
		return p.alterTable()
	}
	return nil, false
}

// renameParser reads the keywords and table names of one statement's
// tokens.
type renameParser struct {
	toks   []token
	schema string // the statement's default schema
}

// kw reports whether token i is an unquoted one of words, in any case.
func (p renameParser) kw(i int, words ...string) bool {
	if i >= len(p.toks) || p.toks[i].quoted {
		return false
	}
	for _, w := range words {
		if strings.EqualFold(p.toks[i].text, w) {
			return true
		}
	}
	return false
}

// name reads the table name at token i, schema.name or a name in the
// default schema; next is the token after it.
func (p renameParser) name(i int) (s, n string, next int, ok bool) {
	toks := p.toks
	if i >= len(toks) || toks[i].text == "," || toks[i].text == "." {
		return "", "", i, false
	}
	s, n = p.schema, toks[i].text
	if i+2 < len(toks) && toks[i+1].text == "." && !toks[i+1].quoted {
		s, n, i = toks[i].text, toks[i+2].text, i+2
	}
	return s, n, i + 1, true
}

// renameTable reads the pairs of RENAME TABLE[S] [IF EXISTS] a [WAIT
// n|NOWAIT] TO b [, c TO d ...].
func (p renameParser) renameTable() (pairs []renamePair, ok bool) {
	i := 2
	if p.kw(i, "IF") && p.kw(i+1, "EXISTS") {
		i += 2
	}
	for {
		fs, f, next, ok := p.name(i)
		if !ok {
			return nil, false
		}
		i = next
		if p.kw(i, "WAIT") {
			i += 2
		} else if p.kw(i, "NOWAIT") {
			i++
		}
		if !p.kw(i, "TO") {
			return nil, false
		}
		ts, to, next, ok := p.name(i + 1)
		if !ok {
			return nil, false
		}
		pairs = append(pairs, renamePair{fs, f, ts, to})
		i = next
		if i >= len(p.toks) || p.toks[i].text != "," {
			return pairs, true
		}
		i++
	}
}

// alterTable reads the rename of ALTER [ONLINE|IGNORE] TABLE [IF EXISTS]
// a ... RENAME [TO|AS] b; ok is false for an ALTER that renames no table.
func (p renameParser) alterTable() (pairs []renamePair, ok bool) {
	i := 1
	for p.kw(i, "ONLINE", "IGNORE") {
		i++
	}
	if !p.kw(i, "TABLE") {
		return nil, false
	}
	i++
	if p.kw(i, "IF") && p.kw(i+1, "EXISTS") {
		i += 2
	}
	fs, f, next, ok := p.name(i)
	if !ok {
		return nil, false
	}
	for j := next; j < len(p.toks); j++ {
		// RENAME [TO|AS] name, not RENAME COLUMN/INDEX/KEY/CONSTRAINT.
		if !p.kw(j, "RENAME") || p.kw(j+1, "COLUMN", "INDEX", "KEY", "CONSTRAINT") {
			continue
		}
		k := j + 1
		if p.kw(k, "TO", "AS") {
			k++
		}
		if ts, to, _, ok := p.name(k); ok {
			return []renamePair{{fs, f, ts, to}}, true
		}
	}
	return nil, false
}

type token struct {
	text   string
	quoted bool
}

// tokens splits a statement into identifiers and words (backquoted ones
// unquoted, “ an escaped backquote), "." and ","; comments and string
// literals are left out.
func tokens(q string) []token {
	var out []token
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '`':
			var b strings.Builder
			j := i + 1
			for j < len(q) {
				if q[j] == '`' {
					if j+1 < len(q) && q[j+1] == '`' {
						b.WriteByte('`')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(q[j])
				j++
			}
			out = append(out, token{b.String(), true})
			i = j + 1
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case c == '#' || (c == '-' && strings.HasPrefix(q[i:], "-- ")):
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				return out
			}
			i += end + 1
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(q) && q[j] != c {
				if q[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '.' || c == ',':
			out = append(out, token{string(c), false})
			i++
		case c == '_' || c == '$' || unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)) || c >= 0x80:
			j := i
			for j < len(q) && (q[j] == '_' || q[j] == '$' || unicode.IsLetter(rune(q[j])) || unicode.IsDigit(rune(q[j])) || q[j] >= 0x80) {
				j++
			}
			out = append(out, token{q[i:j], false})
			i = j
		default:
			i++
		}
	}
	return out
}

// renamed follows the renames of a statement the stream passed
// (internal/tablerename): for each move of an outbox table's rows it sends
// a rename event (before the statement's commit), and remembers where a
// table went, so rows written there later are reported once as not
// published.
func (s *stream) renamed(ctx context.Context, ev *replication.BinlogEvent, schema, query string) error {
	pairs, ok := parseRenames(schema, query)
	if !ok {
		return nil
	}
	ps := make([]tablerename.Pair, len(pairs))
	for i, p := range pairs {
		ps[i] = tablerename.Pair{From: s.r.tableID(p.fromSchema, p.from), To: s.r.tableID(p.toSchema, p.to)}
	}
	s.syncRenames()
	for _, mv := range s.renames.Renamed(ps) {
		t := s.r.tableAt(mv.Table)
		rn := &Rename{Table: t, Schema: mv.To.Schema, Name: mv.To.Table, Replaced: mv.Replaced, Generation: mv.Generation, Earlier: mv.Earlier}
		if mv.Back(s.r.tableID(t.Schema, t.Name)) {
			// As configured (the same table where the source folds names).
			rn.Schema, rn.Name = t.Schema, t.Name
			for _, p := range ps {
				if p.To == mv.To {
					s.r.renamedAway.Delete(p.From)
				}
			}
		} else {
			s.r.renamedAway.Store(mv.To, t.FullName())
		}
		s.r.log.Info("outbox table renamed: rows read before go on to be marked where they now live; the configured name is followed from here",
			"table", t.FullName(), "renamed_to", rn.Schema+"."+rn.Name, "replaced", rn.Replaced, "generation", rn.Generation,
			"earlier", rn.Earlier, "binlog_file", s.tracker.file, "binlog_pos", ev.Header.LogPos)
		if err := send(ctx, s.out, Event{Kind: KindRename, Rename: rn}); err != nil {
			return err
		}
	}
	return nil
}

// noteUnread reports, once per table, inserts into a table that was an
// outbox table before a rename: the relay follows the configured name, so
// those rows are not published, and the sweeper, which reads the
// configured tables only, does not send them either.
func (s *stream) noteUnread(ev *replication.BinlogEvent, e *replication.RowsEvent) {
	if e.Table == nil || rowsKind(ev.Header.EventType) != replication.EnumRowsEventTypeInsert {
		return
	}
	key := s.r.tableID(string(e.Table.Schema), string(e.Table.Table))
	was, ok := s.r.renamedAway.Load(key)
	if !ok {
		return
	}
	if _, warned := s.r.renamedWarned.LoadOrStore(key, true); warned {
		return
	}
	s.r.log.Warn("rows inserted into a table that was an outbox table before a rename are not published, by the binlog path nor by the sweeper: "+
		"the relay reads the table under its configured name; list this table under tables: to have them sent",
		"table", string(e.Table.Schema)+"."+string(e.Table.Table), "configured", was, "binlog_file", s.tracker.file, "binlog_pos", ev.Header.LogPos)
}

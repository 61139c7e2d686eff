// Package tablerename follows outbox tables through RENAME TABLE
// statements, so that the status writes of rows the relay read go to the
// table that holds those rows when they are written.
//
// The rows read under a configured name live in one table until a rename
// takes that table away from the name; from then on they are a
// generation of their own, numbered per configured table, and the Tracker
// follows where that table goes:
//
//   - away: "RENAME TABLE t TO t_2026_11, t_new TO t" (archival), "t TO
//     _t_del, _t_gho TO t" (an online schema change's one-step cut-over),
//     "ALTER TABLE t RENAME TO t_old", or the first statement of a two-step
//     cut-over, "RENAME TABLE t TO _t_del": the rows read under t so far
//     become a generation, now living under the new name. Replaced says
//     another table holds the configured name after the statement (a copy
//     of the same rows in a cut-over, an empty table in archival).
//   - replaced later: the name left empty by an away move gets a table
//     renamed in by a later statement (the second statement of a two-step
//     cut-over, gh-ost's --cut-over=two-step or Facebook's OSC: "RENAME
//     TABLE _t_gho TO t"): the last generation still lives where it went,
//     and the configured name holds another table, maybe its copy.
//   - moved on: a generation's table is renamed again (an archive moved to
//     another schema).
//   - back: a generation's table is renamed back under the configured name
//     ("RENAME TABLE t TO t_tmp", then "RENAME TABLE t_tmp TO t"): its rows
//     are read under the configured name again, and the generation ends.
//
// Names are compared as the caller gives them: folded where the server
// compares them without case (lower_case_table_names 1 and 2), as written
// where it does not.
package tablerename

// Name is a table: schema and name, as the source compares them.
type Name struct{ Schema, Table string }

func (n Name) String() string { return n.Schema + "." + n.Table }

// Pair is one "From TO To" of a rename statement.
type Pair struct{ From, To Name }

// Move is what one statement did to the rows read under a configured
// table's name.
type Move struct {
	// Table is the configured table's index in New's list.
	Table int
	// Generation is the generation concerned: a new one (Earlier false)
	// for the rows read under the configured name since the last away
	// move, or an earlier one.
	Generation uint64
	Earlier    bool
	// To is where the generation's rows live now: the configured name
	// itself when they came back.
	To Name
	// Replaced: another table holds the configured name now; it may hold
	// copies of the generation's rows (matched by message id).
	Replaced bool
}

// Back reports whether the move brought the generation's rows back under
// the configured name.
func (m Move) Back(configured Name) bool { return m.Earlier && m.To == configured }

// keep is how many earlier generations a table's tracker follows; older
// ones are forgotten (their marks were written long before).
const keep = 16

// Tracker follows configured tables through rename statements.
type Tracker struct {
	tables []track
}

type track struct {
	name Name
	// vacant: a rename took the table away from the name and nothing was
	// renamed in or read under it since.
	vacant bool
	last   uint64 // the latest generation (0: none yet)
	gens   []gen  // the earlier generations followed, oldest first
}

type gen struct {
	n  uint64
	at Name
}

// New tracks the configured tables, by their names.
func New(configured []Name) *Tracker {
	t := &Tracker{tables: make([]track, len(configured))}
	for i, n := range configured {
		t.tables[i].name = n
	}
	return t
}

// RowsRead tells the tracker that rows were read under table i's name: a
// name it took for empty holds a table again (created under it).
func (t *Tracker) RowsRead(i int) { t.tables[i].vacant = false }

// token is what a name holds during a statement: table i's current table
// (gen 0) or one of its generations.
type token struct {
	table int
	gen   uint64
}

// Renamed follows one statement's pairs, in order, and returns what they
// did to each configured table's rows: for a table, its away move first,
// then those of its earlier generations.
func (t *Tracker) Renamed(pairs []Pair) []Move {
	at := map[Name]token{}
	for i, tr := range t.tables {
		if !tr.vacant {
			at[tr.name] = token{i, 0}
		}
		for _, g := range tr.gens {
			at[g.at] = token{i, g.n}
		}
	}
	where := map[token]Name{}
	filled := map[Name]bool{} // names some table was renamed to, and still holds
	for _, p := range pairs {
		tok, ok := at[p.From]
		delete(at, p.From)
		filled[p.From] = false
		filled[p.To] = true
		if ok {
			at[p.To] = tok
			where[tok] = p.To
		}
	}
	var moves []Move
	for i := range t.tables {
		moves = append(moves, t.tables[i].apply(i, where, filled)...)
	}
	return moves
}

// apply updates one table's state after a statement and returns its moves.
func (tr *track) apply(i int, where map[token]Name, filled map[Name]bool) []Move {
	var moves []Move
	held := filled[tr.name] // the configured name holds a table after the statement
	if to, ok := where[token{i, 0}]; ok && to != tr.name {
		// The current table went away: its rows become a generation.
		tr.last++
		moves = append(moves, Move{Table: i, Generation: tr.last, To: to, Replaced: held})
		tr.gens = append(tr.gens, gen{tr.last, to})
		tr.vacant = !held
	}
	kept := tr.gens[:0]
	for _, g := range tr.gens {
		to, moved := where[token{i, g.n}]
		switch {
		case moved && to == tr.name:
			// Back under the configured name: read there again.
			moves = append(moves, Move{Table: i, Generation: g.n, Earlier: true, To: to})
			tr.vacant = false
		case moved && to != g.at:
			g.at = to
			moves = append(moves, Move{Table: i, Generation: g.n, Earlier: true, To: to})
			kept = append(kept, g)
		default:
			kept = append(kept, g)
		}
	}
	tr.gens = kept
	if len(tr.gens) > keep {
		tr.gens = append(tr.gens[:0], tr.gens[len(tr.gens)-keep:]...)
	}
	if tr.vacant && held {
		// Another table renamed in under the name the last away move left
		// empty (a two-step cut-over's second statement).
		tr.vacant = false
		for _, g := range tr.gens {
			if g.n == tr.last {
				moves = append(moves, Move{Table: i, Generation: g.n, Earlier: true, To: g.at, Replaced: true})
			}
		}
	}
	return moves
}

// Len is how many tables the tracker follows (New's and Add's).
func (t *Tracker) Len() int { return len(t.tables) }

// Add follows one more table (a table a pattern matched while streaming);
// its index is the previous Len.
func (t *Tracker) Add(n Name) int {
	t.tables = append(t.tables, track{name: n})
	return len(t.tables) - 1
}

// Retire stops following table i under its name (it was dropped): a
// table created under the name later is followed as a new one. Its
// earlier generations, living elsewhere, are still followed.
func (t *Tracker) Retire(i int) {
	t.tables[i].name = Name{}
	t.tables[i].vacant = true
}

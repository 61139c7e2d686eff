package relay

import (
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The recorder keeps, per configured table, the marks of the rows each
// rename moved away (a generation, binlog.Rename.Generation) with where
// they live now: a later rename of that generation (a two-step
// cut-over's second statement, a table renamed back, an archive renamed
// on) has them written again where the rows are then. Generations are
// kept as long as their marks (recentFor, recentKeep) and at most
// keptGenerations per table.

// generation is the kept marks of rows a rename moved away from their
// configured table.
type generation struct {
	at    *outbox.Table // where the rows live now
	marks *recentList
}

// keptGenerations bounds the generations kept per table (the binlog
// reader follows as many: internal/tablerename).
const keptGenerations = 16

// generation returns the marks a move concerns, and records the move: for
// a rename away, the current generation's recent marks, kept from now on
// as a generation of their own; for an earlier generation, its kept marks
// (nil when none are kept: the rename was read before this relay's start,
// or long ago), which join the current generation's when they come back
// under the configured name.
func (w *recorder) generation(mv *moved) *generation {
	t := mv.from
	if w.gens == nil {
		w.gens = map[*outbox.Table]map[uint64]*generation{}
	}
	gens := w.gens[t]
	if gens == nil {
		gens = map[uint64]*generation{}
		w.gens[t] = gens
	}
	if !mv.earlier {
		l := w.recent[t]
		delete(w.recent, t)
		if l == nil {
			l = &recentList{}
		}
		g := &generation{at: mv.to, marks: l}
		gens[mv.gen] = g
		pruneGenerations(gens, mv.gen)
		return g
	}
	g := gens[mv.gen]
	if g == nil {
		return nil
	}
	g.at = mv.to
	if mv.back {
		// Read under the configured name again: later renames of it move
		// these rows with the current ones.
		delete(gens, mv.gen)
		w.recent.list(t).merge(g.marks)
	}
	return g
}

// pruneGenerations forgets the generations whose marks are all past
// recentFor, and the oldest past keptGenerations.
func pruneGenerations(gens map[uint64]*generation, newest uint64) {
	now := time.Now()
	for n, g := range gens {
		g.marks.trim(now)
		if (len(g.marks.marks) == 0 && n != newest) || newest-n >= keptGenerations {
			delete(gens, n)
		}
	}
}

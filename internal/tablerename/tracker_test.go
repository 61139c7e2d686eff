package tablerename

import (
	"fmt"
	"strings"
	"testing"
)

// statement reads "a>b, c>d" in schema app.
func statement(s string) []Pair {
	var ps []Pair
	for _, p := range strings.Split(s, ",") {
		from, to, _ := strings.Cut(strings.TrimSpace(p), ">")
		ps = append(ps, Pair{From: Name{"app", from}, To: Name{"app", to}})
	}
	return ps
}

// moves renders moves as "gN>to" ("e" for an earlier generation, "+r"
// when replaced).
func moves(ms []Move) string {
	var out []string
	for _, m := range ms {
		s := fmt.Sprintf("g%d>%s", m.Generation, m.To.Table)
		if m.Earlier {
			s = "e" + s
		}
		if m.Replaced {
			s += "+r"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// The rules, statement by statement, for one configured table t: each
// step is a statement (or "rows" read under t) and the moves it makes.
func TestRenameRules(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps [][2]string // statement, moves
	}{
		{"one-step cut-over or archival: the rows went, another table took the name", [][2]string{
			{"t>_t_del, _t_gho>t", "g1>_t_del+r"},
		}},
		{"two-step cut-over: away, then another table renamed in under the empty name", [][2]string{
			{"t>_t_del", "g1>_t_del"},
			{"_t_gho>t", "eg1>_t_del+r"},
		}},
		{"away and back: the rows are under t again, and a later rename takes them along", [][2]string{
			{"t>t_tmp", "g1>t_tmp"},
			{"t_tmp>t", "eg1>t"},
			{"t>t_2026, t_new>t", "g2>t_2026+r"},
		}},
		{"there and back in one statement: nothing moved", [][2]string{
			{"t>tmp, tmp>t", ""},
		}},
		{"archives renamed on: each generation is followed", [][2]string{
			{"t>t_1, n1>t", "g1>t_1+r"},
			{"t>t_2, n2>t", "g2>t_2+r"},
			{"t_1>old_1, t_2>old_2", "eg1>old_1 eg2>old_2"},
		}},
		{"renamed away, a table created under the name (rows read there), renamed in: a new table, not the two-step's second statement", [][2]string{
			{"t>t_old", "g1>t_old"},
			{"rows", ""},
			{"t>t_new_old, other>t", "g2>t_new_old+r"},
		}},
		{"swapped with the table an earlier rename took away: the rows read since go, the earlier ones come back", [][2]string{
			{"t>t_a", "g1>t_a"},
			{"rows", ""},
			{"t>t_b, t_a>t", "g2>t_b+r eg1>t"},
		}},
		{"another table's renames change nothing", [][2]string{
			{"u>u2, v>u", ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New([]Name{{"app", "t"}})
			for i, st := range tc.steps {
				if st[0] == "rows" {
					tr.RowsRead(0)
					continue
				}
				if got := moves(tr.Renamed(statement(st[0]))); got != st[1] {
					t.Fatalf("step %d, %q: moves %q, want %q", i, st[0], got, st[1])
				}
			}
		})
	}
}

// Only the last keep generations are followed.
func TestRenameTrackerForgetsOldGenerations(t *testing.T) {
	tr := New([]Name{{"app", "t"}})
	for i := 1; i <= keep+3; i++ {
		tr.Renamed(statement(fmt.Sprintf("t>a%d, n%d>t", i, i)))
	}
	if got := moves(tr.Renamed(statement("a1>b1, a4>b4"))); got != "eg4>b4" {
		t.Fatalf("moves %q; want only generation 4's (1 is forgotten)", got)
	}
}

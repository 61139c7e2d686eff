package tablematch

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func entry(t testing.TB, schema, name string) *outbox.Table {
	p, err := outbox.Preset("producer-message")
	if err != nil {
		t.Fatal(err)
	}
	p.Schema, p.Name = schema, name
	if err := p.Validate("tables[x]"); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestMatcher(t *testing.T) {
	tenants := entry(t, "tenant_*", "outbox")
	app := entry(t, "app", "outbox")
	svc := entry(t, "svc_[0-9]*", "out?ox")
	m, err := New([]*outbox.Table{tenants, app, svc}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		schema, name string
		entry        *outbox.Table
	}{
		{"tenant_1", "outbox", tenants},
		{"tenant_", "outbox", tenants},
		{"tenant_1", "outbox_old", nil},
		{"old_tenant_1", "outbox", nil},
		{"Tenant_1", "outbox", nil}, // lower_case_table_names=0: by case
		{"app", "outbox", app},
		{"svc_7a", "outbox", svc},
		{"svc_7a", "outpox", svc},
		{"svc_a7", "outbox", nil},
	} {
		got, err := m.Table(c.schema, c.name)
		if err != nil {
			t.Fatalf("%s.%s: %v", c.schema, c.name, err)
		}
		switch {
		case c.entry == nil && got != nil:
			t.Errorf("%s.%s matched %s", c.schema, c.name, outbox.EntryOf(got).FullName())
		case c.entry == nil:
		case got == nil:
			t.Errorf("%s.%s matched nothing, want %s", c.schema, c.name, c.entry.FullName())
		case outbox.EntryOf(got) != c.entry || got.Schema != c.schema || got.Name != c.name:
			t.Errorf("%s.%s = %s of %s, want of %s", c.schema, c.name, got.FullName(), outbox.EntryOf(got).FullName(), c.entry.FullName())
		}
	}
	if got, _ := m.Table("app", "outbox"); got != app || got.Entry != nil {
		t.Error("an entry naming one table is that table, not a copy")
	}
	if got, _ := m.Table("mysql", "outbox"); got != nil {
		t.Error("a pattern matched a table of the mysql schema")
	}
}

func TestMatcherFoldsCase(t *testing.T) {
	m, err := New([]*outbox.Table{entry(t, "Tenant_*", "Outbox")}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Table("tenant_1", "outbox"); got == nil {
		t.Error("lower_case_table_names=1: tenant_1.outbox did not match Tenant_*.Outbox")
	}
}

func TestCollisionNamesBothEntries(t *testing.T) {
	m, err := New([]*outbox.Table{entry(t, "app", "outbox"), entry(t, "tenant_*", "outbox"), entry(t, "tenant_1*", "outbox")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Table("tenant_12", "outbox")
	var ce *CollisionError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a CollisionError", err)
	}
	for _, want := range []string{"tenant_12.outbox", "tables[1] (tenant_*.outbox)", "tables[2] (tenant_1*.outbox)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if got, err := m.Table("tenant_2", "outbox"); err != nil || got == nil {
		t.Errorf("tenant_2.outbox: %v, %v; one entry matches it", got, err)
	}
}

// TestMatcherProperties: for random entries and tables, Table returns the
// one entry that matches (path.Match as the reference), nothing when none
// does, and an error naming both lowest-numbered entries when two do.
func TestMatcherProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		part := func(label string) string {
			return strings.Join(rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", "_", "1", "*", "?", "[ab]"}), 1, 4).Draw(rt, label), "")
		}
		n := rapid.IntRange(1, 4).Draw(rt, "entries")
		var entries []*outbox.Table
		seen := map[string]bool{}
		for range n {
			s, nm := part("schema"), part("name")
			if seen[s+"."+nm] {
				continue
			}
			seen[s+"."+nm] = true
			entries = append(entries, entry(t, s, nm))
		}
		m, err := New(entries, 0)
		if err != nil {
			rt.Fatal(err)
		}
		name := func(label string) string {
			return string(rapid.SliceOfN(rapid.SampledFrom([]rune("ab_1")), 1, 5).Draw(rt, label))
		}
		for range 5 {
			s, nm := name("table_schema"), name("table_name")
			var want []int
			for i, e := range entries {
				ms, _ := path.Match(e.Schema, s)
				mn, _ := path.Match(e.Name, nm)
				if ms && mn {
					want = append(want, i)
				}
			}
			got, err := m.Table(s, nm)
			switch len(want) {
			case 0:
				if got != nil || err != nil {
					rt.Fatalf("%s.%s: got %v, %v; no entry matches", s, nm, got, err)
				}
			case 1:
				if err != nil || got == nil || outbox.EntryOf(got) != entries[want[0]] || got.Schema != s || got.Name != nm {
					rt.Fatalf("%s.%s: got %v, %v; want entry %d", s, nm, got, err, want[0])
				}
			default:
				var ce *CollisionError
				if !errors.As(err, &ce) || got != nil {
					rt.Fatalf("%s.%s: got %v, %v; entries %v match", s, nm, got, err, want)
				}
				if ce.First == ce.Second || !slices.Contains(want, ce.First) || !slices.Contains(want, ce.Second) {
					rt.Fatalf("%s.%s: collision names %d and %d, entries %v match", s, nm, ce.First, ce.Second, want)
				}
			}
		}
	})
}

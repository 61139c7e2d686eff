package glob

import (
	"path"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pat, s string
		fold   bool
		want   bool
	}{
		{"tenant_*", "tenant_1", false, true},
		{"tenant_*", "tenant_", false, true},
		{"tenant_*", "old_tenant_1", false, false}, // anchored at the start
		{"tenant_?", "tenant_12", false, false},    // and at the end
		{"tenant_??", "tenant_12", false, true},
		{"tenant_[0-9]*", "tenant_7x", false, true},
		{"tenant_[0-9]*", "tenant_x7", false, false},
		{"tenant_[!0-9]*", "tenant_x7", false, true},
		{"t[]]x", "t]x", false, true},
		{"a\\*b", "a*b", false, true},
		{"a\\*b", "axb", false, false},
		{"Tenant_*", "tenant_1", false, false},
		{"Tenant_*", "tenant_1", true, true},
		{"outbox", "outbox", false, true},
		{"out.box", "outxbox", false, false}, // . is literal
		{"svc$*", "svc$a", false, true},
	} {
		p, err := Compile(c.pat, c.fold)
		if err != nil {
			t.Fatalf("Compile(%q): %v", c.pat, err)
		}
		if got := p.Match(c.s); got != c.want {
			t.Errorf("%q.Match(%q) fold=%v = %v, want %v", c.pat, c.s, c.fold, got, c.want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, bad := range []string{"tenant_[0-9", "a\\", "[]"} {
		if _, err := Compile(bad, false); err == nil {
			t.Errorf("Compile(%q) = nil error", bad)
		} else if !strings.Contains(err.Error(), bad) {
			t.Errorf("Compile(%q) = %v, want it to quote the pattern", bad, err)
		}
	}
	if IsPattern("outbox") || !IsPattern("tenant_*") || !IsPattern("t?") || !IsPattern("t[12]") {
		t.Error("IsPattern")
	}
}

// TestMatchAgreesWithPathMatch: for names of identifier characters (no
// '/', where path.Match differs), a glob matches exactly what Go's
// path.Match, the reference shell glob, matches.
func TestMatchAgreesWithPathMatch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alpha := rapid.SampledFrom([]rune("ab_1$"))
		name := string(rapid.SliceOfN(alpha, 0, 8).Draw(t, "name"))
		patAlpha := rapid.SampledFrom([]string{"a", "b", "_", "1", "$", "*", "?", "[ab]", "[!a]", "[0-9]"})
		pat := strings.Join(rapid.SliceOfN(patAlpha, 0, 6).Draw(t, "pattern"), "")
		p, err := Compile(pat, false)
		if err != nil {
			t.Fatalf("Compile(%q): %v", pat, err)
		}
		want, err := path.Match(strings.ReplaceAll(pat, "[!", "[^"), name)
		if err != nil {
			t.Fatalf("path.Match(%q): %v", pat, err)
		}
		if got := p.Match(name); got != want {
			t.Fatalf("%q.Match(%q) = %v, path.Match says %v", pat, name, got, want)
		}
	})
}

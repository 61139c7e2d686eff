package ident

import "testing"

func TestCheckAndQuote(t *testing.T) {
	for _, ok := range []string{"outbox", "producer_message", "t$1"} {
		if err := Check("f", ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a`b", "a;drop", "é"} {
		if err := Check("tables[0].name", bad); err == nil {
			t.Errorf("Check(%q) = nil, want an error", bad)
		} else if got := err.Error(); got[:15] != "tables[0].name:" {
			t.Errorf("Check(%q) = %q, want it to name the field", bad, got)
		}
	}
	if got := Quote("a`b"); got != "`a``b`" {
		t.Errorf("Quote = %s", got)
	}
	if got := Placeholders(3); got != "?,?,?" {
		t.Errorf("Placeholders(3) = %q", got)
	}
	if got := Placeholders(0); got != "" {
		t.Errorf("Placeholders(0) = %q", got)
	}
}

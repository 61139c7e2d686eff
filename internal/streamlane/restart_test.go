package streamlane

import "testing"

// One lane is named after the relay; several carry their lane and count,
// so a change of relay.lanes gives new producer names.
func TestProducerName(t *testing.T) {
	if got := ProducerName("orders", 0, 1); got != "orders" {
		t.Errorf("one lane: %q", got)
	}
	if got := ProducerName("orders", 2, 4); got != "orders-lane-2-of-4" {
		t.Errorf("lane 2 of 4: %q", got)
	}
	if ProducerName("orders", 1, 2) == ProducerName("orders", 1, 3) {
		t.Error("lane 1 keeps its name when the lane count changes")
	}
}

// The scope does not depend on the order tables are listed in, and
// changes with the tables, the lanes, the stream and the numbering.
func TestScope(t *testing.T) {
	base := Scope([]string{"shop.a", "shop.b"}, 2, "orders", "n")
	if Scope([]string{"shop.b", "shop.a"}, 2, "orders", "n") != base {
		t.Error("the order of the tables changes the scope")
	}
	for name, other := range map[string]string{
		"tables":    Scope([]string{"shop.a"}, 2, "orders", "n"),
		"lanes":     Scope([]string{"shop.a", "shop.b"}, 3, "orders", "n"),
		"stream":    Scope([]string{"shop.a", "shop.b"}, 2, "payments", "n"),
		"numbering": Scope([]string{"shop.a", "shop.b"}, 2, "orders", "m"),
	} {
		if other == base {
			t.Errorf("another %s, the same scope %s", name, base)
		}
	}
	if len(base) != 16 {
		t.Errorf("scope %q: want 16 hex digits", base)
	}
}

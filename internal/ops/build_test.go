package ops

import "testing"

func TestBuildInfoDefaults(t *testing.T) {
	b := BuildInfo{}.Resolved()
	if b.Version != "dev" || b.Commit == "" {
		t.Fatalf("Resolved %+v: want version dev and some commit", b)
	}
	if b := (BuildInfo{Version: "v1.2.3", Commit: "abc123"}).Resolved(); b.Version != "v1.2.3" || b.Commit != "abc123" {
		t.Fatalf("set values replaced: %+v", b)
	}
}

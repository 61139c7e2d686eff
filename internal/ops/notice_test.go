package ops

import (
	"reflect"
	"testing"
	"time"
)

// A notice names its text until its time is up; the last one set wins.
func TestNoticeExpires(t *testing.T) {
	var n Notice
	if got := n.Reasons(); got != nil {
		t.Fatalf("zero notice: %q", got)
	}
	n.Set("gap taken", time.Hour)
	if got := n.Reasons(); !reflect.DeepEqual(got, []string{"gap taken"}) {
		t.Fatalf("live notice: %q", got)
	}
	n.Set("server_id conflict", time.Hour)
	if got := n.Reasons(); !reflect.DeepEqual(got, []string{"server_id conflict"}) {
		t.Fatalf("replaced notice: %q", got)
	}
	n.Set("stream dropped", 20*time.Millisecond)
	if got := n.Reasons(); !reflect.DeepEqual(got, []string{"stream dropped"}) {
		t.Fatalf("short notice before its time: %q", got)
	}
	time.Sleep(50 * time.Millisecond)
	if got := n.Reasons(); got != nil {
		t.Fatalf("expired notice: %q", got)
	}
	n.Set("already over", -time.Second)
	if got := n.Reasons(); got != nil {
		t.Fatalf("notice set in the past: %q", got)
	}
}

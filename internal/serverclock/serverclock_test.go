package serverclock

import (
	"testing"
	"time"
)

// A server's clock, not the client's, sets the bounds: a DATETIME literal
// in the server's wall time, epoch seconds or milliseconds.
func TestClockBounds(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.Local)
	c := Clock{Wall: time.Date(2024, 5, 1, 20, 0, 0, 0, time.UTC), Unix: 1714564800, At: at}
	hourAgo := at.Add(-time.Hour)
	if got := c.DateTime(hourAgo); got != "2024-05-01 19:00:00" {
		t.Errorf("datetime: %q", got)
	}
	if got := c.Value(hourAgo, ""); got != "2024-05-01 19:00:00" {
		t.Errorf("value of a DATETIME: %v", got)
	}
	if got := c.Value(hourAgo.Add(-500*time.Millisecond), "ms"); got != int64(1714561199500) {
		t.Errorf("ms: %v", got)
	}
	if got := c.Value(hourAgo, "s"); got != int64(1714561200) {
		t.Errorf("s: %v", got)
	}
}

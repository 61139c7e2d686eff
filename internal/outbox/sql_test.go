package outbox

import (
	"testing"
	"time"
)

func TestCreatedAge(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name         string
		created, now any
		want         time.Duration
		approx       bool
	}{
		{"datetime", now.Add(-90 * time.Second), now, 90 * time.Second, false},
		{"none pending", nil, now, 0, false},
		{"clock skew", now.Add(time.Second), now, 0, false},
		{"text datetime", []byte("2026-01-02 03:03:05.500"), []byte("2026-01-02 03:04:05.500"), time.Minute, false},
		{"epoch millis", time.Now().Add(-time.Hour).UnixMilli(), now, time.Hour, true},
		{"epoch seconds", time.Now().Add(-time.Hour).Unix(), now, time.Hour, true},
	} {
		got := CreatedAge(c.created, c.now)
		if c.approx && (got < c.want-2*time.Second || got > c.want+2*time.Second) || !c.approx && got != c.want {
			t.Errorf("%s: CreatedAge = %s, want %s", c.name, got, c.want)
		}
	}
}

package preflight

import (
	"testing"
	"time"
)

func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		9 * time.Hour:                 "9h",
		5*time.Hour + 45*time.Minute:  "5h45m",
		30 * time.Minute:              "30m",
		10 * time.Minute:              "10m",
		10 * time.Hour:                "10h",
		time.Hour + 30*time.Second:    "1h0m30s",
		14*time.Hour + 10*time.Second: "14h0m10s",
	} {
		if got := span(d); got != want {
			t.Errorf("span(%s) = %q, want %q", d, got, want)
		}
	}
}

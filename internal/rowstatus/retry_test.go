package rowstatus

import (
	"testing"
	"time"
)

func TestBackoffGrowsAndCaps(t *testing.T) {
	b := Retry{Base: time.Second, Factor: 2, Max: 10 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.Delay(i); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i, got, w)
		}
	}
	b.Jitter = 0.2
	for i := 0; i < 100; i++ {
		d := b.Delay(1)
		if d < 1600*time.Millisecond || d > 2400*time.Millisecond {
			t.Fatalf("jittered delay %s outside 2s +/- 20%%", d)
		}
	}
	if d := b.Delay(5000); d > 12*time.Second {
		t.Fatalf("huge retry count gave %s", d)
	}
}

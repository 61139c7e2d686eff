package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

// delayCase is one Delay call and the pause it must give.
type delayCase struct {
	name string
	b    Backoff
	n    int
	want time.Duration
}

func TestDelayGrowsAndCaps(t *testing.T) {
	for _, c := range []delayCase{
		{"first", Backoff{Initial: time.Second, Max: 30 * time.Second}, 0, time.Second},
		{"negative is first", Backoff{Initial: time.Second, Max: 30 * time.Second}, -3, time.Second},
		{"doubles", Backoff{Initial: time.Second, Max: 30 * time.Second}, 3, 8 * time.Second},
		{"capped", Backoff{Initial: time.Second, Max: 30 * time.Second}, 5, 30 * time.Second},
		{"huge n capped", Backoff{Initial: time.Second, Max: 30 * time.Second}, 5000, 30 * time.Second},
		{"multiplier", Backoff{Initial: 10 * time.Millisecond, Max: time.Second, Multiplier: 3}, 2, 90 * time.Millisecond},
		{"initial above max", Backoff{Initial: time.Minute, Max: time.Second}, 0, time.Second},
		{"no cap", Backoff{Initial: time.Millisecond}, 10, 1024 * time.Millisecond},
	} {
		if got := c.b.Delay(c.n); got != c.want {
			t.Errorf("%s: Delay(%d) = %s, want %s", c.name, c.n, got, c.want)
		}
	}
}

func TestJitterStaysInItsBand(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}
	for i := 0; i < 1000; i++ {
		if d := b.Delay(1); d < 160*time.Millisecond || d >= 240*time.Millisecond {
			t.Fatalf("Delay(1) = %s, want within 200ms +/- 20%%", d)
		}
	}
}

func TestNextAndReset(t *testing.T) {
	b := Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond}
	var got []time.Duration
	for i := 0; i < 5; i++ {
		got = append(got, b.Next())
	}
	want := []time.Duration{50, 100, 200, 200, 200}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("sequence %v, want %v ms", got, want)
		}
	}
	if b.Attempts() != 5 {
		t.Errorf("Attempts = %d, want 5", b.Attempts())
	}
	b.Reset()
	if d := b.Next(); d != 50*time.Millisecond {
		t.Errorf("after Reset Next = %s, want 50ms", d)
	}
}

func TestSleepReturnsAtOnceWhenCancelled(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"Sleep", func(ctx context.Context) error { return Sleep(ctx, time.Hour) }},
		{"Wait", func(ctx context.Context) error { b := Backoff{Initial: time.Hour}; return b.Wait(ctx) }},
		{"zero delay", func(ctx context.Context) error { return Sleep(ctx, 0) }},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		if err := c.run(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want context.Canceled", c.name, err)
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("%s: took %s after cancel", c.name, took)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Errorf("cancel during sleep: err %v after %s", err, time.Since(start))
	}
}

func TestSleepWaits(t *testing.T) {
	start := time.Now()
	if err := Sleep(context.Background(), 20*time.Millisecond); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Sleep(20ms) = %v after %s", err, time.Since(start))
	}
}

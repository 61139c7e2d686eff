// Package backoff owns the relay's one retry pause: an exponential delay
// (initial, multiplier, cap, optional jitter) kept either as a running
// sequence (Next, Reset) for a reconnect loop or computed from a retry count
// (Delay) for a row's next_retry_time, and a Sleep that returns as soon as
// its context ends, so no retry loop outlives a shutdown.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is Initial * Multiplier^n, capped at Max, then spread by
// +/- Jitter (a fraction of the delay). The zero Multiplier means 2 and the
// zero Max means no cap. The zero value of the running sequence is its
// start, so a Backoff literal is ready to use.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	// Jitter spreads each delay uniformly over [d*(1-Jitter), d*(1+Jitter)),
	// so callers that failed together do not retry in step.
	Jitter float64

	attempt int
}

// Delay is the pause before retry number n+1 (n retries done so far; a
// negative n counts as 0). It does not move the running sequence.
func (b *Backoff) Delay(n int) time.Duration {
	m := b.Multiplier
	if m == 0 {
		m = 2
	}
	d := float64(b.Initial) * math.Pow(m, float64(max(n, 0)))
	if b.Max > 0 && (d > float64(b.Max) || math.IsInf(d, 0)) {
		d = float64(b.Max)
	}
	if b.Jitter > 0 {
		d *= 1 + b.Jitter*(2*rand.Float64()-1)
	}
	if d >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// Next returns the next pause of the running sequence and moves it on.
func (b *Backoff) Next() time.Duration {
	d := b.Delay(b.attempt)
	b.attempt++
	return d
}

// Reset starts the running sequence again at Initial (after a success).
func (b *Backoff) Reset() { b.attempt = 0 }

// Attempts is how many pauses Next has handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }

// Wait sleeps for Next(), or less when ctx ends first (then it returns
// ctx.Err()).
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next())
}

// Sleep pauses for d and returns nil, or returns ctx.Err() at once when ctx
// ends first. A non-positive d only checks ctx.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

package status

import (
	"time"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// Backoff is exponential with jitter: base * factor^retries, capped, then
// randomised by +/- jitter (a fraction).
type Backoff struct {
	Base   time.Duration `yaml:"base"`
	Factor float64       `yaml:"factor"`
	Max    time.Duration `yaml:"max"`
	Jitter float64       `yaml:"jitter"`
}

// Defaults fills unset fields: 5s, x2, capped at 10 min, 20% jitter.
func (b *Backoff) Defaults() {
	if b.Base == 0 {
		b.Base = 5 * time.Second
	}
	if b.Factor == 0 {
		b.Factor = 2
	}
	if b.Max == 0 {
		b.Max = 10 * time.Minute
	}
	if b.Jitter == 0 {
		b.Jitter = 0.2
	}
}

// Delay is the wait before retry number retries+1.
func (b Backoff) Delay(retries int) time.Duration {
	h := backoff.Backoff{Initial: b.Base, Max: b.Max, Multiplier: b.Factor, Jitter: b.Jitter}
	return h.Delay(retries)
}

package rowstatus

import (
	"cmp"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// Retry is the backoff of a row that failed to publish: exponential with
// jitter, base * factor^retries, capped, then randomised by +/- jitter (a
// fraction). It is the `retry:` section of the relay's YAML (internal/app
// converts it); NewWriter fills its zero fields.
type Retry struct {
	Base, Max      time.Duration
	Factor, Jitter float64
}

// Defaults fills unset fields: 5s, x2, capped at 10 min, 20% jitter.
func (b *Retry) Defaults() {
	b.Base = cmp.Or(b.Base, 5*time.Second)
	b.Factor = cmp.Or(b.Factor, 2)
	b.Max = cmp.Or(b.Max, 10*time.Minute)
	b.Jitter = cmp.Or(b.Jitter, 0.2)
}

// Delay is the wait before retry number retries+1.
func (b Retry) Delay(retries int) time.Duration {
	h := backoff.Backoff{Initial: b.Base, Max: b.Max, Multiplier: b.Factor, Jitter: b.Jitter}
	return h.Delay(retries)
}

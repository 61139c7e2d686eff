package inbox

import (
	"time"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// Backoff returns the delay before retry number retry+1 of a message that has been
// retried retry times: base, 2*base, 4*base, ... capped at max. It has no jitter: rows
// are already spread by the times their handlers failed.
func Backoff(retry int, base, max time.Duration) time.Duration {
	b := backoff.Backoff{Initial: base, Max: max}
	// min: a max of zero or below caps everything, as it always has (the
	// helper reads a zero Max as no cap).
	return min(b.Delay(retry), max)
}

package inbox

import "time"

// Backoff returns the delay before retry number retry+1 of a message that has been
// retried retry times: base, 2*base, 4*base, ... capped at max. It has no jitter: rows
// are already spread by the times their handlers failed.
func Backoff(retry int, base, max time.Duration) time.Duration {
	if retry < 0 {
		retry = 0
	}
	d := base
	for i := 0; i < retry; i++ {
		if d >= max/2 {
			return max
		}
		d *= 2
	}
	if d > max {
		return max
	}
	return d
}

package config

import (
	"time"
)

// Backoff is the `retry:` section: exponential backoff with jitter for rows
// that failed to publish (base * factor^retries, capped at max, randomised
// by +/- jitter). A zero field means the status writer's default
// (internal/rowstatus.Retry: 5s, x2, 10m, 0.2).
type Backoff struct {
	Base   time.Duration `yaml:"base"`
	Factor float64       `yaml:"factor"`
	Max    time.Duration `yaml:"max"`
	Jitter float64       `yaml:"jitter"`
}

// HoldBackoff is `relay.hold_backoff:`: the wait between attempts while
// the stream holds behind one message (relay.ordering: strict, or a row of
// a table without a status column and no dead-letter exchange), doubling
// from base up to max. Unset fields take retry.base and retry.max, which is
// what they were before they had a key of their own. Its bounds are the
// publisher's to check (publisher.HoldBackoff), once an unset one followed
// retry:.
type HoldBackoff struct {
	Base time.Duration `yaml:"base"`
	Max  time.Duration `yaml:"max"`
}

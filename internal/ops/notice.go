// Package ops owns what the relay reports about itself over HTTP: /readyz,
// /metrics, /leader. A Notice is a /readyz reason that holds for a while:
// a gap taken recently, a server_id conflict or a second relay with one
// name going on.
package ops

import (
	"sync/atomic"
	"time"
)

// Notice is one timed /readyz reason; the last Set replaces the one
// before. The zero Notice names nothing; it is safe for concurrent use.
type Notice struct {
	reason atomic.Pointer[timedReason]
}

type timedReason struct {
	text  string
	until time.Time
}

// Set names text on /readyz for d from now.
func (n *Notice) Set(text string, d time.Duration) {
	n.reason.Store(&timedReason{text: text, until: time.Now().Add(d)})
}

// Reasons are /readyz's reasons from the notice: the text last set, until
// its time is up.
func (n *Notice) Reasons() []string {
	r := n.reason.Load()
	if r == nil || time.Now().After(r.until) {
		return nil
	}
	return []string{r.text}
}

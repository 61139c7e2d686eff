package replay

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseRate reads --rate: N, N/s, N/m or N/h, as messages a second.
func ParseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	per := map[string]float64{"": 1, "s": 1, "m": 60, "h": 3600}[unit]
	if err != nil || n < 0 || math.IsNaN(n) || math.IsInf(n, 0) || per == 0 {
		return 0, fmt.Errorf("%q is not a rate like 500/s (or N/m, N/h; 0 for unthrottled)", s)
	}
	return n / per, nil
}

// pacer spaces messages to a rate (--rate N/s): a token bucket holding at
// most burstWindow's worth of messages. The burst makes up for timer
// overshoot (a sleep of 200µs often takes longer), so the rate holds over a
// second; it is short, so a long pause (a slow chunk read, a broker
// hiccup) is not made up by a flood: the consumer and the replica never see
// much more than the rate. Zero rate: no pacing.
type pacer struct {
	interval time.Duration
	next     time.Time
	now      func() time.Time
}

// burstWindow bounds the catch-up after a pause.
const burstWindow = 50 * time.Millisecond

func newPacer(perSecond float64) *pacer {
	p := &pacer{now: time.Now}
	if perSecond > 0 {
		p.interval = time.Duration(float64(time.Second) / perSecond)
	}
	return p
}

// wait blocks until the next message may go, or ctx ends.
func (p *pacer) wait(ctx context.Context) error {
	if p.interval <= 0 {
		return ctx.Err()
	}
	now := p.now()
	if floor := now.Add(-max(burstWindow, p.interval)); p.next.Before(floor) {
		p.next = floor.Add(p.interval)
	}
	d := p.next.Sub(now)
	p.next = p.next.Add(p.interval)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package metrics

import (
	"sync"
	"time"
)

// The last hour of publishing in memory, for the console's chart: Prometheus
// keeps the long history, but the console must draw something on a relay
// nobody scrapes (and without a query language in the page).

// RecentStep is the width of one point of Recent, and RecentSpan how far
// back it goes.
const (
	RecentStep = 10 * time.Second
	RecentSpan = time.Hour
)

const recentSlots = int(RecentSpan / RecentStep)

// Recent is a ring of RecentStep buckets over RecentSpan: rows published and
// failed, and the publish-to-confirm latency of the published ones. The
// settle stage adds to it once per row, under one uncontended mutex.
type Recent struct {
	mu    sync.Mutex
	slots [recentSlots]recentSlot
	now   func() time.Time
}

type recentSlot struct {
	epoch     int64 // unix time / RecentStep of the bucket the slot holds now
	published int64
	failed    int64
	confirm   time.Duration // sum over published
	maxConf   time.Duration
}

// RecentPoint is one bucket: its start, the rows published and failed in
// it, and the mean and highest publish-to-confirm latency.
type RecentPoint struct {
	At                time.Time
	Published, Failed int64
	MeanConfirm       time.Duration
	MaxConfirm        time.Duration
}

func newRecent() *Recent { return &Recent{now: time.Now} }

// slot returns the slot of t's bucket, cleared when it held an older one.
// Call with mu held.
func (r *Recent) slot(t time.Time) *recentSlot {
	e := t.UnixNano() / int64(RecentStep)
	s := &r.slots[int(e%int64(recentSlots))]
	if s.epoch != e {
		*s = recentSlot{epoch: e}
	}
	return s
}

func (r *Recent) published(confirm time.Duration) {
	r.mu.Lock()
	s := r.slot(r.now())
	s.published++
	s.confirm += confirm
	s.maxConf = max(s.maxConf, confirm)
	r.mu.Unlock()
}

func (r *Recent) failed() {
	r.mu.Lock()
	r.slot(r.now()).failed++
	r.mu.Unlock()
}

// Points returns the last RecentSpan, oldest first, one point per
// RecentStep (empty buckets as zeros); the last point is the bucket in
// progress.
func (r *Recent) Points() []RecentPoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.now().UnixNano() / int64(RecentStep)
	out := make([]RecentPoint, 0, recentSlots)
	for e := last - int64(recentSlots) + 1; e <= last; e++ {
		p := RecentPoint{At: time.Unix(0, e*int64(RecentStep))}
		if s := r.slots[int(e%int64(recentSlots))]; s.epoch == e {
			p.Published, p.Failed, p.MaxConfirm = s.published, s.failed, s.maxConf
			if s.published > 0 {
				p.MeanConfirm = s.confirm / time.Duration(s.published)
			}
		}
		out = append(out, p)
	}
	return out
}

// Recent is the last hour of publishing (the console's chart).
func (m *Metrics) Recent() *Recent { return m.recent }

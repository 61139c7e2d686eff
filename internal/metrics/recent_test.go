package metrics

import (
	"testing"
	"time"
)

// The chart's ring: a row lands in its bucket, buckets older than an hour
// fall out, and a slot reused after an hour starts from zero.
func TestRecentBuckets(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := &Recent{now: func() time.Time { return now }}
	r.published(10 * time.Millisecond)
	r.published(30 * time.Millisecond)
	r.failed()
	pts := r.Points()
	if len(pts) != recentSlots {
		t.Fatalf("%d points, want %d", len(pts), recentSlots)
	}
	last := pts[len(pts)-1]
	if last.Published != 2 || last.Failed != 1 || last.MeanConfirm != 20*time.Millisecond || last.MaxConfirm != 30*time.Millisecond {
		t.Errorf("last bucket %+v", last)
	}
	if !pts[0].At.Before(last.At) || last.At.Sub(pts[0].At) != RecentSpan-RecentStep {
		t.Errorf("points span %s .. %s", pts[0].At, last.At)
	}
	now = now.Add(RecentStep)
	r.published(time.Millisecond)
	if pts := r.Points(); pts[len(pts)-2].Published != 2 || pts[len(pts)-1].Published != 1 {
		t.Errorf("after one step: %+v %+v", pts[len(pts)-2], pts[len(pts)-1])
	}
	now = now.Add(RecentSpan) // the same slots, an hour on
	r.published(time.Millisecond)
	var sum int64
	for _, p := range r.Points() {
		sum += p.Published
	}
	if sum != 1 {
		t.Errorf("an hour later %d rows in the window, want 1", sum)
	}
}

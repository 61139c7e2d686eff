package publisher

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestExchangeCacheExpiresAndStaysBounded(t *testing.T) {
	now := time.Unix(0, 0)
	c := newExchangeCache(3)
	c.now = func() time.Time { return now }
	c.put("up", true)
	c.put("gone", false)
	if exists, ok := c.get("up"); !ok || !exists {
		t.Fatalf("up = %v %v, want cached as existing", exists, ok)
	}
	if exists, ok := c.get("gone"); !ok || exists {
		t.Fatalf("gone = %v %v, want cached as missing", exists, ok)
	}
	now = now.Add(2 * time.Second) // past the negative TTL, within the positive one
	if _, ok := c.get("gone"); ok {
		t.Error("a missing exchange is still cached after 2s; it must be rechecked within 1-2s")
	}
	if _, ok := c.get("up"); !ok {
		t.Error("an existing exchange was forgotten after 2s")
	}
	now = now.Add(30 * time.Second)
	if _, ok := c.get("up"); ok {
		t.Error("an existing exchange is still cached after 32s")
	}
	for i := range 10 {
		c.put(fmt.Sprintf("ex%d", i), true)
	}
	if c.len() != 3 {
		t.Errorf("cache holds %d names, want at most 3", c.len())
	}
	if _, ok := c.get("ex9"); !ok {
		t.Error("the most recent name was evicted")
	}
	if _, ok := c.get("ex0"); ok {
		t.Error("the least recently used name was kept")
	}
}

func TestWarnLimiterLogsRepeatsOnceWithACount(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	now := time.Unix(0, 0)
	w := newWarnLimiter(zap.New(core), 10*time.Second)
	w.now = func() time.Time { return now }
	for i := range 1000 {
		w.warn("publish failed", zap.String("exchange", "gone"), zap.Int("row", i))
	}
	w.warn("publish failed", zap.String("exchange", "other"))
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines for 1000 identical warnings and one other, want 2", n)
	}
	now = now.Add(11 * time.Second)
	w.warn("publish failed", zap.String("exchange", "gone"))
	last := logs.All()[2]
	if got := last.ContextMap()["repeated"]; got != int64(999) {
		t.Errorf("repeated = %v, want 999", got)
	}
}

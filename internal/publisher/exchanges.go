package publisher

import (
	"container/list"
	"sync"
	"time"
)

// exchangeCache remembers passive exchange checks for a while, so a row to a
// missing exchange costs neither a broker round trip per row nor
// throughput: 30 s for an exchange that exists (a deleted one is still
// caught, by the broker's 404 on publish), 1.5 s for a missing one (so a
// newly declared exchange is used almost at once). It holds at most max
// names, dropping the least recently used.
type exchangeCache struct {
	mu       sync.Mutex
	max      int
	positive time.Duration
	negative time.Duration
	now      func() time.Time
	order    *list.List // front: most recently used; values are *cached
	byName   map[string]*list.Element
}

type cached struct {
	name    string
	exists  bool
	expires time.Time
}

func newExchangeCache(max int) *exchangeCache {
	return &exchangeCache{max: max, positive: 30 * time.Second, negative: 1500 * time.Millisecond,
		now: time.Now, order: list.New(), byName: map[string]*list.Element{}}
}

func (c *exchangeCache) get(name string) (exists, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.byName[name]
	if el == nil {
		return false, false
	}
	v := el.Value.(*cached)
	if !c.now().Before(v.expires) {
		c.order.Remove(el)
		delete(c.byName, name)
		return false, false
	}
	c.order.MoveToFront(el)
	return v.exists, true
}

func (c *exchangeCache) put(name string, exists bool) {
	if name == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ttl := c.positive
	if !exists {
		ttl = c.negative
	}
	v := &cached{name: name, exists: exists, expires: c.now().Add(ttl)}
	if el := c.byName[name]; el != nil {
		el.Value = v
		c.order.MoveToFront(el)
		return
	}
	c.byName[name] = c.order.PushFront(v)
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byName, last.Value.(*cached).name)
	}
}

func (c *exchangeCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// exists answers from the cache, or asks check (a session's passive
// declare) and caches it. The default exchange ("") always exists.
func (c *exchangeCache) exists(name string, check func(string) (bool, error)) (bool, error) {
	if name == "" {
		return true, nil
	}
	if exists, ok := c.get(name); ok {
		return exists, nil
	}
	exists, err := check(name)
	if err != nil {
		return false, err
	}
	c.put(name, exists)
	return exists, nil
}

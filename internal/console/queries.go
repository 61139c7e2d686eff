package console

// The console's load on the replica: each kind of query (the groups of a
// table, one page of a group) is asked at most once per CacheFor whatever
// the number of browsers and live streams, and never twice at once: a
// request that finds it running waits for that result. A query that took
// long is kept longer, slowTTL times its duration, so the console never
// keeps the replica busy more than a tenth of the time with one kind.

import (
	"context"
	"sort"
	"sync"
	"time"
)

// maxCached bounds the kinds kept (a group's pages are kinds of their own).
const maxCached = 512

// slowTTL: a result is fresh for at least this many times the query took.
const slowTTL = 10

type queryCache struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	kinds map[string]*cached
	stats map[string]*QueryStat // by family ("groups", "rows")
}

type cached struct {
	val     any
	err     error
	at      time.Time     // when the value was read
	took    time.Duration // what reading it took
	running chan struct{} // closed when the query in flight ends; nil when none
}

// QueryStat is what one family of queries cost, for the page footer and
// docs/console.md: how many ran, and the last and slowest replica time.
type QueryStat struct {
	Family     string
	Runs       int64
	Last, Max  time.Duration
	LastAt     time.Time
	LastErrors int64
}

func newQueryCache(ttl time.Duration) *queryCache {
	return &queryCache{ttl: ttl, now: time.Now, kinds: map[string]*cached{}, stats: map[string]*QueryStat{}}
}

// get returns kind's value: the cached one while fresh, else the result of
// fetch (run once for every waiter, detached from a waiter that gives up,
// within timeout). age is how old the value is.
func (c *queryCache) get(ctx context.Context, family, kind string, timeout time.Duration, fetch func(context.Context) (any, error)) (v any, age time.Duration, err error) {
	for {
		c.mu.Lock()
		e := c.kinds[kind]
		if e == nil {
			c.evict()
			e = &cached{}
			c.kinds[kind] = e
		}
		if e.running == nil && !e.at.IsZero() && c.now().Sub(e.at) < max(c.ttl, slowTTL*e.took) {
			v, err, age = e.val, e.err, c.now().Sub(e.at)
			c.mu.Unlock()
			return v, age, err
		}
		if e.running == nil {
			e.running = make(chan struct{})
			go c.run(e, family, timeout, fetch)
		}
		wait := e.running
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		c.mu.Lock()
		if e.running == nil && !e.at.IsZero() {
			v, err, age = e.val, e.err, c.now().Sub(e.at)
			c.mu.Unlock()
			return v, age, err
		}
		c.mu.Unlock()
	}
}

func (c *queryCache) run(e *cached, family string, timeout time.Duration, fetch func(context.Context) (any, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	v, err := fetch(ctx)
	took := time.Since(began)
	c.mu.Lock()
	defer c.mu.Unlock()
	e.val, e.err, e.at, e.took = v, err, c.now(), took
	close(e.running)
	e.running = nil
	st := c.stats[family]
	if st == nil {
		st = &QueryStat{Family: family}
		c.stats[family] = st
	}
	st.Runs++
	st.Last, st.LastAt = took, time.Now()
	st.Max = max(st.Max, took)
	if err != nil {
		st.LastErrors++
	}
}

// forget drops the cached values whose kind starts with prefix (after an
// action changed what they show).
func (c *queryCache) forget(prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.kinds {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix && e.running == nil {
			delete(c.kinds, k)
		}
	}
}

// evict drops the oldest idle kinds past maxCached; call with mu held.
func (c *queryCache) evict() {
	if len(c.kinds) < maxCached {
		return
	}
	type kv struct {
		k  string
		at time.Time
	}
	var idle []kv
	for k, e := range c.kinds {
		if e.running == nil {
			idle = append(idle, kv{k, e.at})
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].at.Before(idle[j].at) })
	for _, x := range idle[:min(len(idle), len(c.kinds)-maxCached+1)] {
		delete(c.kinds, x.k)
	}
}

// Stats lists what each family of queries cost so far, by name.
func (c *queryCache) Stats() []QueryStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]QueryStat, 0, len(c.stats))
	for _, s := range c.stats {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Family < out[j].Family })
	return out
}

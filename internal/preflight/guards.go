package preflight

// The checks of what guards a start: the source replica's threads, one
// relay per name and per source.server_id, and a gap in the relay's
// position.

import (
	"context"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/replica"
)

// Instances finds another relay with this name and another replica of the
// source with this source.server_id (internal/instance).
type Instances interface {
	// Other is the heartbeat of another relay running with this name.
	Other(ctx context.Context) (instance string, ok bool)
	// Registered lists the source's replicas with this source.server_id.
	Registered(ctx context.Context) ([]string, error)
}

// Gaps is the gap policy (internal/startpos).
type Gaps interface {
	// Refusal is the error a gap described by what is refused with, or
	// nil when it would be taken.
	Refusal(what string) error
	// Handling labels a gap taken: metrics.GapSweeper or GapAccepted.
	Handling() string
	// CheckpointLost reports a checkpoint this relay name saved before
	// that is gone now, and when the first was saved.
	CheckpointLost(ctx context.Context) (since string, lost bool, err error)
	// LostWhat describes a lost checkpoint.
	LostWhat(since string) string
}

// checkReplica reports stopped replication threads and errors on the
// source replica (a warning: the relay starts, reads what arrives, and the
// sweeper covers the rest).
func (c *checker) checkReplica(ctx context.Context) {
	s := c.s
	addr := s.SourceConfig().Addr()
	st, err := replica.ReadState(ctx, s.Source, addr)
	where := "source " + addr
	if err != nil {
		c.add(Warning, where, "cannot read its replica status: %v", err)
		return
	}
	if !st.IsReplica {
		return
	}
	if !st.Running() {
		c.add(Warning, where, "the source replica is not replicating from %s (%s): %s; until then the relay reads nothing new and the sweeper sends rows after sweeper.grace_period",
			st.Master, st.Threads(), st.Fix())
		return
	}
	if st.SecondsBehind != nil && time.Duration(*st.SecondsBehind)*time.Second > s.Config.HTTP.ReadyMaxLag {
		c.add(Warning, where, "the source replica is %ds behind its primary %s (over http.ready_max_lag %s)", *st.SecondsBehind, st.Master, s.Config.HTTP.ReadyMaxLag)
	}
}

// checkDuplicates reports another relay with this name (its heartbeat in
// Redis) and another replica of the source with this source.server_id
// (SHOW SLAVE HOSTS): an error at run's start, a warning for check.
func (c *checker) checkDuplicates(ctx context.Context) {
	s, cfg := c.s, c.s.Config
	if v, ok := s.Instances.Other(ctx); ok {
		c.add(Warning, "relay "+cfg.Name, "another relay named %q is running (instance %s): a second one would be refused at start; give each relay its own name, or set ha.enabled", cfg.Name, v)
	}
	id := cfg.Source.ServerID
	if id == 0 {
		return // a random id per start
	}
	where := "source " + s.SourceConfig().Addr()
	others, err := s.Instances.Registered(ctx)
	if err != nil {
		c.add(Warning, where, "cannot list the source's replicas to look for a second relay with source.server_id %d (SHOW SLAVE HOSTS or SHOW REPLICAS: %v): grant REPLICATION MASTER ADMIN (MariaDB) or REPLICATION SLAVE (MySQL) to the relay user", id, err)
		return
	}
	sev := Warning
	if s.Starting {
		sev = Error
	}
	for _, o := range others {
		c.add(sev, where, "another replica is connected to the source with source.server_id %d (registered as %s): the source drops one of two streams with one server_id; give each relay its own source.server_id", id, o)
	}
}

// checkGap reports a gap the checks found: an error when it would be
// refused, a warning saying what will happen otherwise.
func (c *checker) checkGap(where, what string) {
	g := c.s.Gaps
	if err := g.Refusal(what); err != nil {
		c.add(Error, where, "%v", err)
		return
	}
	how := "the relay will start at the current position; rows committed in the gap stay PENDING and the sweeper sends them"
	if g.Handling() == metrics.GapAccepted {
		how = "the relay will start at the current position (--accept-gap): rows committed in the gap to tables without a status column are lost"
	}
	c.add(Warning, where, "%s: %s", what, how)
}

// lostCheckpoint describes a checkpoint this relay name saved before that
// is gone now ("": none, or not known).
func (c *checker) lostCheckpoint(ctx context.Context) string {
	if since, lost, err := c.s.Gaps.CheckpointLost(ctx); err == nil && lost {
		return c.s.Gaps.LostWhat(since)
	}
	return ""
}

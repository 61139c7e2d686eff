package app

// The check of the source replica's replication threads.

import (
	"context"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/replica"
)

// checkReplica reports stopped replication threads and errors on the
// source replica (a warning: the relay starts, reads what arrives, and the
// sweeper covers the rest).
func (c *checker) checkReplica(ctx context.Context) {
	a := c.a
	st, err := replica.ReadState(ctx, a.Source, a.sourceAddr())
	where := "source " + a.sourceAddr()
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
	if st.SecondsBehind != nil && time.Duration(*st.SecondsBehind)*time.Second > a.Cfg.HTTP.ReadyMaxLag {
		c.add(Warning, where, "the source replica is %ds behind its primary %s (over http.ready_max_lag %s)", *st.SecondsBehind, st.Master, a.Cfg.HTTP.ReadyMaxLag)
	}
}

package app

// The start-up check of a gap (the policy is internal/startpos's).

import (
	"context"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
)

// checkGap reports a gap the start-up checks found: an error when it would
// be refused, a warning saying what will happen otherwise.
func (c *checker) checkGap(where, what string) {
	g := c.a.gaps()
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

// checkpointLost and lostWhat are startpos.Gaps's, for checkStream
// (check_servers.go) until it calls c.a.gaps() itself.
func (a *App) checkpointLost(ctx context.Context) (since string, lost bool, err error) {
	return a.gaps().CheckpointLost(ctx)
}

func (a *App) lostWhat(since string) string { return a.gaps().LostWhat(since) }

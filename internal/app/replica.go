package app

// Replica health: the App wires internal/replica's watch (the source
// replica's replication threads and the relay's delay behind the primary)
// to its connections and runs it beside the binlog path.

import (
	"context"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/replica"
)

// replicaService polls replica health every replica.PollEvery, and looks
// for a server_id conflict after each poll while the stream is down
// (instance.ServerIDs.Refused).
func (a *App) replicaService() service {
	return func(ctx context.Context) error {
		a.Metrics().WatchReplica(a.replica.Metrics())
		tick := time.NewTicker(replica.PollEvery)
		defer tick.Stop()
		for {
			a.replica.Poll(ctx, a.replicaServers(), a.Log)
			if r := a.ops.reader.Load(); r != nil && !r.Connected() && a.replica.Streaming() {
				qctx, cancel := context.WithTimeout(ctx, replica.PollEvery)
				a.guard.get(a).serverIDs.Refused(qctx, &a.notice, 2*replica.PollEvery+time.Second)
				cancel()
			}
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
	}
}

// replicaServers is the App's connections as internal/replica reads them.
func (a *App) replicaServers() replica.Servers {
	return replica.Of(a.Source, a.Primary, a.Cfg.Primary.Addr())
}

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
// for a server_id conflict after each poll (serverid_watch.go).
func (a *App) replicaService() service {
	return func(ctx context.Context) error {
		a.Metrics().WatchReplica(a.replica.Metrics())
		tick := time.NewTicker(replica.PollEvery)
		defer tick.Stop()
		for {
			a.replica.Poll(ctx, a.replicaServers(), a.Log)
			qctx, cancel := context.WithTimeout(ctx, replica.PollEvery)
			a.watchServerID(qctx)
			cancel()
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

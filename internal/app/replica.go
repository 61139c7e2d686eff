package app

// Replica health: the App wires internal/replica's watch (the source
// replica's replication threads and the relay's delay behind the primary)
// to its connections and runs it beside the binlog path.

import (
	"context"
	"database/sql"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/replica"
)

// replicaServers is the App's connections as internal/replica reads them.
type replicaServers struct{ a *App }

func (s replicaServers) Source() *sql.DB                            { return s.a.Source }
func (s replicaServers) SourceAddr() string                         { return s.a.sourceAddr() }
func (s replicaServers) Flavor(ctx context.Context) (string, error) { return s.a.Flavor(ctx) }
func (s replicaServers) Primary() *sql.DB                           { return s.a.Primary }
func (s replicaServers) PrimaryAddr() string                        { return s.a.Cfg.Primary.Addr() }

// replicaService polls replica health every replica.PollEvery, and looks
// for a server_id conflict after each poll (serverid_watch.go).
func (a *App) replicaService() service {
	return func(ctx context.Context) error {
		a.Metrics().WatchReplica(a.replica.Metrics())
		tick := time.NewTicker(replica.PollEvery)
		defer tick.Stop()
		for {
			a.replica.Poll(ctx, replicaServers{a}, a.Log)
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

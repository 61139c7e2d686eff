package app

// The start-up check of one relay per name and per source.server_id (the
// heartbeat and SHOW SLAVE HOSTS are internal/instance's).

import "context"

// checkDuplicates reports another relay with this name (its heartbeat in
// Redis) and another replica of the source with this source.server_id
// (SHOW SLAVE HOSTS).
func (c *checker) checkDuplicates(ctx context.Context) {
	a := c.a
	if v, ok := a.heartbeat().Other(ctx); ok {
		c.add(Warning, "relay "+a.Cfg.Name, "another relay named %q is running (instance %s): a second one would be refused at start; give each relay its own name, or set ha.enabled", a.Cfg.Name, v)
	}
	id := a.Cfg.Source.ServerID
	if id == 0 {
		return // a random id per start
	}
	where := "source " + a.sourceAddr()
	others, err := a.serverIDs().Registered(ctx)
	if err != nil {
		c.add(Warning, where, "cannot list the source's replicas to look for a second relay with source.server_id %d (SHOW SLAVE HOSTS or SHOW REPLICAS: %v): grant REPLICATION MASTER ADMIN (MariaDB) or REPLICATION SLAVE (MySQL) to the relay user", id, err)
		return
	}
	sev := Warning
	if a.starting.Load() {
		sev = Error
	}
	for _, o := range others {
		c.add(sev, where, "another replica is connected to the source with source.server_id %d (registered as %s): the source drops one of two streams with one server_id; give each relay its own source.server_id", id, o)
	}
}

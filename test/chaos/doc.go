// Package chaos is the fault harness (`make chaos`, and three fixed seeds in
// `make test`): a seed draws a schedule (a configuration, a topology of
// relays, Redis and brokers, traffic, and faults at random times from a
// catalogue: kills, pauses, resets and blackholes, failovers, cut-overs,
// re-queues, config changes), a writer commits outbox transactions and logs
// each one, consumers record every delivery, and one checker reads the
// whole history: lost, duplicates per fault against its documented bound,
// drafts, rolled-back or never-to-publish rows delivered, order per key,
// rows left pending. A failed schedule keeps its history as an artifact;
// named scenarios keep each loss path found. See docs/ha.md, "What each
// fault costs" and "The fault harness".
package chaos

// Package chaos is the failure-survival suite (`make chaos`, and a short form
// in `make test`): a producer writes orders with their outbox rows at a
// steady rate while a schedule kills relays, lets a standby take over,
// restarts or cuts RabbitMQ, Redis and replicas, and fails over between
// replicas; a consumer through pkg/inbox counts what arrives. The run prints
// rows committed, messages delivered, distinct, lost (must be 0),
// duplicates with the largest burst, FAILED rows and the longest stall.
// See docs/ha.md.
package chaos

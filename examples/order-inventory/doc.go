// Package orderinventory is an end-to-end example of binlog-relay and pkg/inbox.
//
// The order service (package order) writes an order and its outbox row
// (producer_message) in one transaction. The relay publishes the outbox row to the
// "orders" exchange with the row's message_id as AMQP message-id. The inventory service
// (package inventory) consumes the "inventory.order-created" queue through the inbox
// and deducts stock, exactly once per order although delivery is at least once.
//
// Run it with `make demo` (see the Makefile and README.md); e2e_test.go runs the same
// flow with 10,000 orders and two consumer restarts.
package orderinventory

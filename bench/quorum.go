package main

// The quorum drain: binlog-relay's backlog drain once more, in the same
// run, into a quorum queue instead of the classic one, so the two figures
// come from the same machine minutes apart. A quorum queue (RabbitMQ 3.8
// and later) is a Raft log written to disk and fsynced before the broker
// confirms, so the relay's publisher confirms come later and the broker
// spends more per message; this is what a deployment that declares its
// queues quorum should expect.

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// quorumQueue is the run's quorum queue, named after its classic one.
func (t topology) quorumQueue() string { return t.queue + ".quorum" }

// declareQuorumQueue declares the quorum queue, unbound until its drain:
// durable, neither exclusive nor auto-delete, which a quorum queue refuses
// (https://www.rabbitmq.com/docs/quorum-queues#feature-matrix).
func (t topology) declareQuorumQueue(ch *amqp.Channel) error {
	_, err := ch.QueueDeclare(t.quorumQueue(), true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	if err != nil {
		return fmt.Errorf("declaring quorum queue %s: %w", t.quorumQueue(), err)
	}
	return nil
}

// rebind makes to the queue the run's exchange routes to instead of from.
// One queue is bound at a time, so the broker stores each message once, as
// in the classic drain. No relay runs while it is called, so nothing is
// routed to both or to neither.
func (t topology) rebind(from, to string) error {
	conn, ch, err := dialChannel(t.amqpURL, false)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.QueueBind(to, "#", t.exchange, false, nil); err != nil {
		return fmt.Errorf("binding %s: %w", to, err)
	}
	if err := ch.QueueUnbind(from, "#", t.exchange, nil); err != nil {
		return fmt.Errorf("unbinding %s: %w", from, err)
	}
	return nil
}

// drainQuorum is drainRelay into the quorum queue, read by a consumer of
// its own; the classic queue and its consumer are back when it returns.
func drainQuorum(ctx context.Context, e *env) (drainResult, error) {
	progress("drain: binlog-relay again into a quorum queue, %d rows", e.o.backlog)
	// Not an exclusive consumer: the queue is the run's own, so exclusivity
	// would buy nothing, and the drain should not depend on a consumer
	// feature beyond plain auto-ack.
	c, err := startConsumer(e.o.amqpURL, e.topo.quorumQueue(), false)
	if err != nil {
		return drainResult{}, err
	}
	if err := e.topo.rebind(e.topo.queue, e.topo.quorumQueue()); err != nil {
		c.close()
		return drainResult{}, err
	}
	classic := e.consumer
	e.consumer = c
	r, err := drainRelay(ctx, e)
	e.consumer = classic
	c.close()
	if rerr := e.topo.rebind(e.topo.quorumQueue(), e.topo.queue); rerr != nil && err == nil {
		err = fmt.Errorf("back to the classic queue: %w", rerr)
	}
	if err != nil {
		return r, err
	}
	progress("  binlog-relay into a quorum queue: %.0f msg/s (first delivery after %s, all in %s)",
		r.rate, r.first.Round(time.Millisecond), r.totalTime.Round(time.Millisecond))
	return r, nil
}

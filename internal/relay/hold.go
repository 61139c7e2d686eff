package relay

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Headers on a message the relay sends to the dead-letter exchange because
// it could not route the row: the reason is the publisher's header (the
// same one a broker refusal gets), plus the table.
const (
	HeaderReason = publisher.HeaderReason
	HeaderTable  = "x-relay-table"
)

// holdRemindEvery spaces the error line repeated while the relay holds.
const holdRemindEvery = time.Minute

// Holding reports what the stream is held behind, if anything: a row the
// relay holds itself, or the message the publisher holds (strict ordering,
// or a must-deliver message the broker refuses and no dead-letter exchange).
// With several lanes it is the hold of the lane held longest, naming it.
func (r *Relay) Holding() (publisher.Hold, bool) {
	if h := r.hold.Load(); h != nil {
		return *h, true
	}
	var held publisher.Hold
	found := false
	for i, l := range r.lanes {
		h, ok := l.Holding()
		if !ok || (found && !h.Since.Before(held.Since)) {
			continue
		}
		if len(r.lanes) > 1 {
			h.Lane = fmt.Sprintf("lane %d of %d", i, len(r.lanes))
		}
		held, found = h, true
	}
	return held, found
}

// holdUnroutable holds the stream behind a row of a table without a status
// column that cannot be routed, with no dead-letter exchange configured:
// its failure cannot be recorded in the table, and skipping it would lose
// it. Routing depends only on the row and the configuration, so retrying
// cannot help: the stream waits (readiness and the hold metric say why)
// until the relay is stopped; the checkpoint stays before the row's
// transaction, so a restart with a fixed route or a dead-letter exchange
// replays it. It returns nil on a graceful stop, ctx's error on a hard one.
func (r *Relay) holdUnroutable(ctx, stop context.Context, row *outbox.Row, cause error) error {
	h := &publisher.Hold{MessageID: router.MessageID(row), Reason: cause.Error(), Since: time.Now(), Attempts: 1}
	r.hold.Store(h)
	fields := []zap.Field{zap.String("table", row.Table.FullName()), zap.String("message_id", h.MessageID),
		zap.Any("id", row.ID), zap.String("reason", h.Reason)}
	r.log.Error("a row of a table without a status column cannot be routed and no broker.dead_letter_exchange is set: "+
		"the stream holds behind it until the route is fixed and the relay restarted", fields...)
	remind := time.NewTicker(holdRemindEvery)
	defer remind.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stop.Done():
			return nil
		case <-remind.C:
			r.log.Error("still holding behind a row that cannot be routed", append(fields,
				zap.Duration("held_for", time.Since(h.Since).Round(time.Second)))...)
		}
	}
}

// unroutableMessage addresses a row that cannot be routed to the
// dead-letter exchange, with the reason and the table in headers; the
// routing key is the table's name (bind the dead-letter queue with "#" on a
// topic exchange, or use a fanout exchange).
func (r *Relay) unroutableMessage(row *outbox.Row, cause error) *router.Message {
	t := row.Table
	return &router.Message{Row: row, Exchange: r.cfg.DeadLetterExchange, RoutingKey: t.FullName(),
		Publishing: amqp.Publishing{
			MessageId:    router.MessageID(row),
			ContentType:  "application/octet-stream",
			DeliveryMode: amqp.Persistent,
			Timestamp:    time.Now().UTC(),
			AppId:        r.router.AppID(),
			Body:         colval.ValueBytes(row.Values[t.Columns.Payload]),
			Headers:      amqp.Table{HeaderReason: cause.Error(), HeaderTable: t.FullName()},
		}}
}

// holdUnrecorded is the committer's answer to a failed result for a row whose
// failure cannot be recorded (no status column). The publisher delivers such
// rows or dead-letters them and never reports them failed; should one come
// back failed all the same, skipping it would lose it, so the committer marks
// what came before, saves the checkpoint below the row and waits for the
// stop. After it, later results are drained without being applied: the
// checkpoint never passes the row.
func (c *committer) holdUnrecorded(ctx context.Context, row *outbox.Row, exchange string, cause error) error {
	c.keepNone = true
	if err := c.flush(ctx, true, false); err != nil {
		return err
	}
	h := &publisher.Hold{MessageID: router.MessageID(row), Exchange: exchange, Reason: cause.Error(), Since: time.Now(), Attempts: 1}
	c.r.hold.Store(h)
	c.r.log.Error("a row of a table without a status column failed and cannot be recorded: the stream holds behind it until the relay is restarted",
		zap.String("table", row.Table.FullName()), zap.String("message_id", h.MessageID), zap.String("exchange", exchange),
		zap.Any("id", row.ID), zap.String("reason", h.Reason))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stop.Done():
	}
	c.discard = true
	return nil
}

// HoldReason renders a hold for readiness and logs.
func HoldReason(h publisher.Hold, now time.Time) string {
	who := "publishing"
	if h.Lane != "" {
		who = h.Lane
	}
	what := fmt.Sprintf("message %q", h.MessageID)
	if h.Exchange != "" {
		what += fmt.Sprintf(" to exchange %q", h.Exchange)
	}
	return fmt.Sprintf("%s holds behind %s for %s (%d attempts): %s", who, what, now.Sub(h.Since).Round(time.Second), h.Attempts, h.Reason)
}

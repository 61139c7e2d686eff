package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// Consumer consumes a queue through the inbox: a pool of workers, each delivery handled
// in one transaction with its inbox row and ACKed only after that transaction's outcome
// is durable. It reconnects after a broker restart and, unless disabled, runs the retry
// task and the retention purge beside the workers.
type Consumer struct {
	cfg     Config
	inbox   *Inbox
	retrier *Retrier
	purger  *Purger
	ownPub  *AMQPPublisher
	dial    Dialer
	log     *slog.Logger

	// beforeAck, if set, runs after the outcome is durable and before the ACK. Tests
	// use it to kill the process in exactly that window.
	beforeAck func(Message, Outcome)
}

// Option adds an optional dependency to New.
type Option func(*options)

type options struct {
	dedup       DedupStore
	metrics     Metrics
	dial        Dialer
	pub         Publisher
	fromHeaders []ContextFromHeaders
}

// WithDedup enables the Redis fast path (see NewRedisDedup).
func WithDedup(d DedupStore) Option { return func(o *options) { o.dedup = d } }

// WithMetrics sets the metrics hooks.
func WithMetrics(m Metrics) Option { return func(o *options) { o.metrics = m } }

// WithDialer sets how TCP connections to the broker are opened (the consumer's and the
// retry publisher's).
func WithDialer(d Dialer) Option { return func(o *options) { o.dial = d } }

// WithPublisher replaces the retry task's publisher (by default its own AMQP connection
// to cfg.URL).
func WithPublisher(p Publisher) Option { return func(o *options) { o.pub = p } }

// New returns a Consumer. db must reach the database holding both cfg.Table and the
// handler's business tables: they share a transaction. log receives the consumer's
// state changes and each failed or dropped message (nil logs nothing); a zap user
// passes slog.New(zapslog.NewHandler(zapLogger.Core())), see Example_zap.
func New(cfg Config, db *sql.DB, h Handler, log *slog.Logger, opts ...Option) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil || h == nil {
		return nil, errors.New("inbox: New needs a database and a handler")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	log = orDiscard(log)
	c := &Consumer{cfg: cfg, dial: o.dial, log: log,
		inbox: newInbox(cfg, db, h, o.dedup, o.metrics, log)}
	c.inbox.fromHeaders = o.fromHeaders
	if !cfg.DisableRetryTask && cfg.mapping().Kind == KindState {
		// A dedup table holds no body to republish: a failed delivery is requeued
		// by the broker instead (dedup.go).
		pub := o.pub
		if pub == nil {
			c.ownPub = NewAMQPPublisher(cfg.URL, cfg.ConsumerName+"-inbox-retry", o.dial)
			pub = c.ownPub
		}
		c.retrier, _ = NewRetrier(cfg, db, pub, log) // cfg is already valid
	}
	if !cfg.DisableRetention {
		c.purger, _ = NewPurger(cfg, db, log)
	}
	return c, nil
}

// Inbox returns the inbox behind the consumer, for feeding it messages from elsewhere.
func (c *Consumer) Inbox() *Inbox { return c.inbox }

// Run consumes until ctx is cancelled, then stops taking deliveries, lets in-flight
// handlers finish (up to ShutdownTimeout) and ACKs them, and returns nil. It returns an
// error only when the consumer cannot start: the inbox table is missing, the pool's
// sessions run with unique_checks=0, or the broker refuses the queue or the
// credentials.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.checkTable(ctx); err != nil {
		return err
	}
	defer func() {
		if c.ownPub != nil {
			_ = c.ownPub.Close()
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.consume(gctx) })
	if c.retrier != nil {
		g.Go(func() error { return c.retrier.Run(gctx) })
	}
	if c.purger != nil {
		g.Go(func() error { return c.purger.Run(gctx) })
	}
	return g.Wait()
}

func (c *Consumer) checkTable(ctx context.Context) error {
	// In a transaction, rolled back at once: on a pool with autocommit=0 a bare
	// SELECT would leave a transaction open on its connection, holding the
	// table's metadata lock (an ALTER TABLE would wait for it).
	tx, err := c.inbox.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("checking inbox table %q: %w", c.inbox.st.m.Table, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := checkSession(ctx, tx); err != nil {
		return err
	}
	m := c.inbox.st.m
	var cols []string
	forEachField(&m.Columns, func(_ string, v *string) {
		if *v != "" {
			cols = append(cols, *v)
		}
	})
	rows, err := tx.QueryContext(ctx, `SELECT `+list(cols...)+` FROM `+q(m.Table)+` LIMIT 0`)
	if err != nil && m.Columns.Headers != "" && strings.Contains(err.Error(), "'"+m.Columns.Headers+"'") {
		return fmt.Errorf("inbox table %q has no column %q, where the retry task keeps each message's headers (a table made before it was added): "+
			"ALTER TABLE %s ADD COLUMN %s MEDIUMTEXT NULL (schema/consumer_message.sql), or set Columns.Headers to \"-\" to retry without the original headers: %w",
			m.Table, m.Columns.Headers, q(m.Table), q(m.Columns.Headers), err)
	}
	if err != nil {
		return fmt.Errorf("checking inbox table %q (apply schema/consumer_message.sql, or set Preset and Columns to the table you have: docs/inbox.md; preset %s): %w", m.Table, m.name, err)
	}
	if err := rows.Close(); err != nil || m.LogTable == "" {
		return err
	}
	cols = nil
	forEachField(&m.LogColumns, func(_ string, v *string) {
		if *v != "" {
			cols = append(cols, *v)
		}
	})
	rows, err = tx.QueryContext(ctx, `SELECT `+list(cols...)+` FROM `+q(m.LogTable)+` LIMIT 0`)
	if err != nil {
		return fmt.Errorf("checking inbox processing log %q with LogColumns (docs/inbox.md): %w", m.LogTable, err)
	}
	return rows.Close()
}

// consume runs broker sessions, reconnecting with backoff, until ctx is done.
func (c *Consumer) consume(ctx context.Context) error {
	wait, started := backoff.Backoff{Initial: c.cfg.ReconnectDelay, Max: c.cfg.ReconnectMaxDelay}, false
	for {
		consumed, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !started && permanent(err) {
			return fmt.Errorf("starting consumer on queue %q: %w", c.cfg.Queue, err)
		}
		if consumed {
			started = true
			wait.Reset()
		}
		delay := wait.Next()
		c.log.Warn("broker session ended; reconnecting", slog.String("queue", c.cfg.Queue),
			slog.Duration("delay", delay), slog.Any("error", err))
		if backoff.Sleep(ctx, delay) != nil {
			return nil
		}
	}
}

// permanent reports broker refusals that a reconnect will not cure.
func permanent(err error) bool {
	if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) {
		return true
	}
	var ae *amqp.Error
	return errors.As(err, &ae) && (ae.Code == amqp.NotFound || ae.Code == amqp.AccessRefused ||
		ae.Code == amqp.NotAllowed)
}

// session consumes on one connection until it drops or ctx is done. consumed reports
// whether the consumer got as far as receiving.
func (c *Consumer) session(ctx context.Context) (consumed bool, err error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(c.cfg.ConsumerName + "-inbox")
	conn, err := amqp.DialConfig(c.cfg.URL, amqp.Config{Dial: c.dial, Properties: props})
	if err != nil {
		return false, fmt.Errorf("connecting to broker: %w", redactURL(err, c.cfg.URL))
	}
	// Closing the connection returns every unACKed delivery to the queue.
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("opening channel: %w", err)
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("setting prefetch %d: %w", c.cfg.Prefetch, err)
	}
	// Buffered: the client library blocks on an unread notification.
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := ch.Consume(c.cfg.Queue, c.cfg.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consuming queue %q: %w", c.cfg.Queue, err)
	}
	c.log.Info("consuming", slog.String("queue", c.cfg.Queue), slog.String("consumer", c.cfg.ConsumerName),
		slog.Int("workers", c.cfg.Workers), slog.Int("prefetch", c.cfg.Prefetch))

	// Handlers run on a context that shutdown does not cancel, so in-flight work
	// finishes and is ACKed; only ShutdownTimeout cancels it.
	work, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	var wg sync.WaitGroup
	for i := 0; i < c.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.worker(ctx, work, deliveries)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	select {
	case <-done: // deliveries closed: the channel or connection is gone
	case <-ctx.Done():
		t := time.NewTimer(c.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			c.log.Warn("shutdown timeout; cancelling in-flight handlers (their messages will be redelivered)",
				slog.Duration("timeout", c.cfg.ShutdownTimeout))
			hardStop()
			<-done
		}
		return true, nil
	}
	select {
	case e := <-closed:
		if e != nil {
			return true, fmt.Errorf("channel closed by broker: %w", e)
		}
	default:
	}
	return true, errors.New("delivery channel closed (connection lost)")
}

// worker handles deliveries until they stop or ctx is done.
func (c *Consumer) worker(ctx, work context.Context, deliveries <-chan amqp.Delivery) {
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			if ctx.Err() != nil {
				return // not started: closing the connection requeues it
			}
			c.handle(ctx, work, d)
		}
	}
}

func (c *Consumer) handle(ctx, work context.Context, d amqp.Delivery) {
	m := Message{ID: d.MessageId, Body: d.Body, ContentType: d.ContentType,
		Exchange: d.Exchange, RoutingKey: d.RoutingKey, Redelivered: d.Redelivered, Headers: d.Headers}
	out, err := c.inbox.Process(work, m)
	if err != nil {
		if work.Err() != nil {
			return // cancelled at shutdown: left unACKed, redelivered later
		}
		c.log.Warn("inbox could not record the message; requeueing it", slog.String("message_id", m.ID),
			slog.String("queue", c.cfg.Queue), slog.Duration("delay", c.cfg.RequeueDelay), slog.Any("error", err))
		// Wait first so an unreachable database does not turn the queue into a spin.
		select {
		case <-time.After(c.cfg.RequeueDelay):
		case <-ctx.Done():
		}
		if err := d.Nack(false, true); err != nil {
			c.log.Debug("nack failed; the broker requeues on connection loss", slog.Any("error", err))
		}
		return
	}
	if c.beforeAck != nil {
		c.beforeAck(m, out)
	}
	if err := d.Ack(false); err != nil {
		// The outcome is recorded: the redelivery will be recognised as a duplicate.
		c.log.Warn("ACK failed; the redelivery will be ACKed as a duplicate",
			slog.String("message_id", m.ID), slog.Any("error", err))
	}
}

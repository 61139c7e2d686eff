// Command inventory-service deducts stock for each order.created event through the
// inbox, so redelivered events deduct nothing.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/binlog-relay/binlog-relay/examples/order-inventory/inventory"
	"github.com/binlog-relay/binlog-relay/examples/order-inventory/order"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

func main() {
	dsn := flag.String("dsn", "root@tcp(127.0.0.1:3307)/shop", "MySQL/MariaDB DSN (stock and inbox tables)")
	amqpURL := flag.String("amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	redisAddr := flag.String("redis", "", "Redis address for the dedup fast path (empty: off)")
	workers := flag.Int("workers", 8, "deliveries handled at once")
	seed := flag.Int("seed", 0, "if positive, set the stock of every SKU to this before consuming")
	skus := flag.Int("skus", 20, "number of SKUs to seed (sku-000 ...)")
	flag.Parse()

	log, _ := zap.NewProduction()
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, *dsn, *amqpURL, *redisAddr, *workers, *seed, *skus); err != nil {
		log.Error("inventory-service stopped", zap.Error(err))
		os.Exit(1)
	}
}

func run(ctx context.Context, log *zap.Logger, dsn, url, redisAddr string, workers, seed, skus int) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("opening database: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(2 * workers)
	if seed > 0 {
		names := make([]string, skus)
		for i := range names {
			names[i] = fmt.Sprintf("sku-%03d", i)
		}
		if err := inventory.Seed(ctx, db, names, seed); err != nil {
			return err
		}
	}
	if err := declare(url, log); err != nil {
		return err
	}
	var opts []inbox.Option
	if redisAddr != "" {
		opts = append(opts, inbox.WithDedup(inbox.NewRedisDedup(redis.NewClient(&redis.Options{Addr: redisAddr}))))
	}
	counters := &inbox.Counters{}
	opts = append(opts, inbox.WithMetrics(counters))
	c, err := inbox.New(inbox.Config{URL: url, Queue: inventory.Queue, ConsumerName: "inventory-service",
		Workers: workers}, db, inventory.Deduct, slog.New(zapslog.NewHandler(log.Core(), zapslog.WithName("inbox"))), opts...)
	if err != nil {
		return err
	}
	go report(ctx, log, counters)
	return c.Run(ctx)
}

func declare(url string, log *zap.Logger) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("connecting to broker to declare topology: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	err = inventory.DeclareTopology(ch, order.Exchange, inventory.Queue)
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
		return err
	}
	// The queue exists with other arguments: a classic queue from an older version of
	// the demo. It is consumed as it is (the refusal closed the channel: bind on another).
	log.Warn("the inventory queue exists as another queue type; using it as it is (delete it to have a quorum queue)",
		zap.String("queue", inventory.Queue), zap.Error(err))
	if ch, err = conn.Channel(); err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	if err := ch.QueueBind(inventory.Queue, order.RoutingKey, order.Exchange, false, nil); err != nil {
		return fmt.Errorf("binding queue %s: %w", inventory.Queue, err)
	}
	return nil
}

func report(ctx context.Context, log *zap.Logger, c *inbox.Counters) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s := c.Snapshot()
			log.Info("inbox", zap.Int64("processed", s.Processed), zap.Int64("duplicates", s.Duplicates),
				zap.Int64("retries", s.Retries), zap.Int64("failed", s.Failed))
		}
	}
}

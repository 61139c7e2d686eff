package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

// An inventory service deducting stock for each order event, exactly once per event.
// The handler's writes and the inbox row commit in one transaction; a body that cannot
// be parsed is reported with inbox.Malformed and recorded FAILED without retries.
func Example() {
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/shop?parseTime=true")
	if err != nil {
		panic(err)
	}
	deduct := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		var order struct {
			SKU      string `json:"sku"`
			Quantity int    `json:"quantity"`
		}
		if err := json.Unmarshal(m.Body, &order); err != nil {
			return inbox.Malformed(err)
		}
		_, err := tx.ExecContext(ctx,
			`UPDATE stock SET quantity = quantity - ? WHERE sku = ?`, order.Quantity, order.SKU)
		return err // an error rolls the deduction back and schedules a retry
	}
	cfg := inbox.Config{
		URL:          "amqp://guest:guest@127.0.0.1:5672/",
		Queue:        "inventory.order-created",
		ConsumerName: "inventory-service",
		Workers:      8,
		MaxRetries:   5,
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	counters := &inbox.Counters{}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	c, err := inbox.New(cfg, db, deduct, log,
		inbox.WithDedup(inbox.NewRedisDedup(rdb)), // optional fast path
		inbox.WithMetrics(counters))
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := c.Run(ctx); err != nil { // blocks; returns nil after a clean shutdown
		panic(err)
	}
	fmt.Printf("%+v\n", counters.Snapshot())
}

// A service that logs with zap hands the inbox its zap logger through
// zapslog: the inbox's lines come out of the same core, under the name given.
func Example_zap() {
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/shop?parseTime=true")
	if err != nil {
		panic(err)
	}
	zl, err := zap.NewProduction()
	if err != nil {
		panic(err)
	}
	log := slog.New(zapslog.NewHandler(zl.Core(), zapslog.WithName("inbox")))
	cfg := inbox.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Queue: "inventory.order-created", ConsumerName: "inventory-service"}
	handle := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error { return nil }
	c, err := inbox.New(cfg, db, handle, log)
	if err != nil {
		panic(err)
	}
	_ = c.Run(context.Background())
}

// A handler reports a body it can never handle with Malformed: the message is recorded
// FAILED with the reason at once instead of being retried.
func ExampleMalformed() {
	err := inbox.Malformed(errors.New("quantity must be positive"))
	fmt.Println(errors.Is(err, inbox.ErrMalformed))
	fmt.Println(err)
	// Output:
	// true
	// malformed message: quantity must be positive
}

// The retry delays with RetryBackoff 1s and RetryMaxBackoff 30s.
func ExampleBackoff() {
	for retry := 0; retry < 7; retry++ {
		fmt.Print(inbox.Backoff(retry, time.Second, 30*time.Second), " ")
	}
	fmt.Println()
	// Output:
	// 1s 2s 4s 8s 16s 30s 30s
}

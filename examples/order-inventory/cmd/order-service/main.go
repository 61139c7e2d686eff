// Command order-service places random orders, each with its outbox row in the same
// transaction, for the relay to publish.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/examples/order-inventory/order"
)

func main() {
	dsn := flag.String("dsn", "root@tcp(127.0.0.1:3307)/shop", "MySQL/MariaDB DSN of the primary")
	orders := flag.Int("orders", 1000, "orders to place")
	workers := flag.Int("concurrency", 8, "orders placed at once")
	skus := flag.Int("skus", 20, "number of SKUs (sku-000 ...)")
	maxQty := flag.Int("max-qty", 5, "largest quantity per order")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dsn, *orders, *workers, *skus, *maxQty); err != nil {
		log.Printf("order-service: %v", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn string, orders, workers, skus, maxQty int) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("opening database: %w", err)
	}
	defer db.Close()
	svc := order.New(db, order.Exchange)
	var next, placed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(orders) && ctx.Err() == nil {
				sku := fmt.Sprintf("sku-%03d", rand.IntN(skus))
				if _, _, err := svc.Place(ctx, sku, 1+rand.IntN(maxQty)); err != nil {
					errs <- err
					return
				}
				if n := placed.Add(1); n%1000 == 0 {
					log.Printf("placed %d orders", n)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	log.Printf("placed %d orders in %s", placed.Load(), time.Since(start).Round(time.Millisecond))
	return ctx.Err()
}

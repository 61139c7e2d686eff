// Command demo is the Compose demo's one-shot: it places a few orders, each with its
// outbox row, waits until the inventory service has handled their events, and prints what
// it received. It exits 1 when an event did not arrive in time, saying where it is.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/examples/order-inventory/demo"
	"github.com/binlog-relay/binlog-relay/examples/order-inventory/order"
)

func main() {
	dsn := flag.String("dsn", "root@tcp(127.0.0.1:3307)/shop", "MySQL/MariaDB DSN of the primary (orders, outbox, inbox, stock)")
	var o demo.Options
	flag.IntVar(&o.Orders, "orders", 5, "orders to place")
	flag.StringVar(&o.Exchange, "exchange", order.Exchange, "exchange of the outbox rows")
	flag.StringVar(&o.Consumer, "consumer", "inventory-service", "the inventory service's inbox consumer name")
	flag.DurationVar(&o.Wait, "wait", 2*time.Minute, "how long to wait for the events to be handled")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("mysql", *dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	defer db.Close()
	if err := demo.Run(ctx, db, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

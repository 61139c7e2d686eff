package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// producer writes an order and its outbox row in one transaction, batch
// rows per transaction, at rate rows per second, until stopped.
type producer struct {
	committed atomic.Int64
	errors    atomic.Int64
	lastErr   atomic.Pointer[string]
	stop      chan struct{}
	done      chan struct{}
}

func startProducer(db *sql.DB, exchange string, rate, batch int) *producer {
	p := &producer{stop: make(chan struct{}), done: make(chan struct{})}
	every := time.Second * time.Duration(batch) / time.Duration(rate)
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			if err := p.writeBatch(db, exchange, n, batch); err != nil {
				// An error at commit may hide a commit: the database, not this
				// counter, says what was committed.
				p.errors.Add(1)
				msg := err.Error()
				p.lastErr.Store(&msg)
				continue
			}
			p.committed.Add(int64(batch))
		}
	}()
	return p
}

func (p *producer) writeBatch(db *sql.DB, exchange string, n, batch int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var orders, outbox strings.Builder
	orders.WriteString("INSERT INTO orders (order_no, amount) VALUES ")
	outbox.WriteString("INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES ")
	for j := 0; j < batch; j++ {
		no := fmt.Sprintf("o-%07d-%02d", n, j)
		if j > 0 {
			orders.WriteByte(',')
			outbox.WriteByte(',')
		}
		fmt.Fprintf(&orders, "('%s', %d)", no, 100+j)
		fmt.Fprintf(&outbox, "('%s', '%s', 'order.created', '{\"order_no\":\"%s\",\"amount\":%d}')", no, exchange, no, 100+j)
	}
	if _, err := tx.ExecContext(ctx, orders.String()); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, outbox.String()); err != nil {
		return err
	}
	return tx.Commit()
}

func (p *producer) halt() {
	close(p.stop)
	<-p.done
}

package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
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

// tally is the consumer side: the inbox calls it once per delivery, in
// the order the workers finish them.
type tally struct {
	mu         sync.Mutex
	processed  int64
	duplicates int64
	failed     int64
	run        int64 // duplicates in a row now
	runStart   time.Time
	burst      int64 // largest run of duplicates
	burstAt    time.Time
	last       time.Time
	stall      time.Duration
	stallAt    time.Time
	started    time.Time
}

func (t *tally) Processed(time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	from := t.last
	if from.IsZero() {
		from = t.started
	}
	if gap := now.Sub(from); !t.started.IsZero() && gap > t.stall {
		t.stall, t.stallAt = gap, from
	}
	t.processed++
	t.run = 0
	t.last = now
}

func (t *tally) Duplicate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.duplicates++
	if t.run++; t.run == 1 {
		t.runStart = time.Now()
	}
	if t.run > t.burst {
		t.burst, t.burstAt = t.run, t.runStart
	}
}

func (t *tally) Retry() {}

func (t *tally) Failed() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed++
}

func (t *tally) snapshot() (processed, duplicates, failed, burst int64, burstAt time.Time, stall time.Duration, stallAt time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.processed, t.duplicates, t.failed, t.burst, t.burstAt, t.stall, t.stallAt
}

// count runs a one-number query on the test database.
func count(t *testing.T, db *testenv.DB, q string) int64 {
	t.Helper()
	var n int64
	if err := db.Primary.QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// failedRows lists FAILED outbox rows with their reasons.
func failedRows(t *testing.T, db *testenv.DB) []string {
	t.Helper()
	rows, err := db.Primary.Query("SELECT message_id, COALESCE(error_msg, '') FROM producer_message WHERE status = 'FAILED' ORDER BY id LIMIT 20")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, reason string
		if err := rows.Scan(&id, &reason); err != nil {
			t.Fatal(err)
		}
		out = append(out, id+": "+reason)
	}
	return out
}

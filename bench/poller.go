package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// poller is the polling outbox relay of the seeds, the baseline binlog-relay
// is measured against. One loop on one primary connection:
//
//  1. claim, in a READ COMMITTED transaction: SELECT the oldest due PENDING
//     rows (index order: status, next_retry_time, id) LIMIT batch FOR UPDATE
//     SKIP LOCKED, UPDATE them to SENDING (version+1), COMMIT;
//  2. publish each row (persistent, mandatory) on one channel in confirm
//     mode and wait for every confirm;
//  3. UPDATE the confirmed rows to SENT in one statement (a returned or
//     nacked row goes back to PENDING with a later next_retry_time).
//
// It polls again at once after a full batch (there is more work), and
// otherwise sleeps the poll interval; with eager set, after any row.
type poller struct {
	db       *sql.DB
	amqpURL  string
	batch    int
	interval time.Duration
	eager    bool

	stmts     atomic.Int64 // statements sent to the primary, by its own count
	published atomic.Int64

	stop chan struct{}
	done chan error
	once sync.Once
}

// newPoller opens its own connection to the primary with the session at
// READ COMMITTED (set once per connection, as a pool configured for it does).
func newPoller(e *env, interval time.Duration) (*poller, error) {
	root, err := openDB(e.o.primaryDSN, e.dbName, nil)
	if err != nil {
		return nil, err
	}
	var version string
	err = root.QueryRow("SELECT VERSION()").Scan(&version)
	_ = root.Close()
	if err != nil {
		return nil, err
	}
	// MariaDB < 11.1 and MySQL 5.7 know tx_isolation; MySQL 8 only
	// transaction_isolation.
	iso := "transaction_isolation"
	if strings.Contains(strings.ToLower(version), "mariadb") {
		iso = "tx_isolation"
	}
	db, err := openDB(e.contenderDSN(), e.dbName, map[string]string{iso: "'READ-COMMITTED'"})
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return &poller{db: db, amqpURL: e.o.amqpURL, batch: e.o.pollBatch, interval: interval, eager: e.o.pollEager,
		stop: make(chan struct{}), done: make(chan error, 1)}, nil
}

func (p *poller) String() string { return fmt.Sprintf("poller (%s)", p.interval) }

// start runs the loop in the background.
func (p *poller) start() {
	go func() { p.done <- p.run() }()
}

// halt stops after the current poll and returns the loop's error.
func (p *poller) halt() error {
	p.once.Do(func() { close(p.stop) })
	err := <-p.done
	p.done <- err
	_ = p.db.Close()
	return err
}

func (p *poller) run() error {
	conn, ch, err := dialChannel(p.amqpURL, true)
	if err != nil {
		return err
	}
	defer conn.Close()
	returns := ch.NotifyReturn(make(chan amqp.Return, p.batch))
	ctx := context.Background()
	for {
		select {
		case <-p.stop:
			return nil
		default:
		}
		n, err := p.poll(ctx, ch, returns)
		if err != nil {
			return err
		}
		if n == p.batch || (p.eager && n > 0) {
			continue
		}
		select {
		case <-p.stop:
			return nil
		case <-time.After(p.interval):
		}
	}
}

type claimed struct {
	id                                uint64
	messageID, exchange, key, content string
}

func (p *poller) exec(ctx context.Context, ex interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) error {
	p.stmts.Add(1)
	_, err := ex.ExecContext(ctx, q, args...)
	return err
}

// poll claims, publishes and settles one batch; it returns the rows claimed.
func (p *poller) poll(ctx context.Context, ch *amqp.Channel, returns chan amqp.Return) (int, error) {
	rows, err := p.claim(ctx)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	confirms := make([]*amqp.DeferredConfirmation, len(rows))
	for i, r := range rows {
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, r.exchange, r.key, true, false, amqp.Publishing{
			MessageId: r.messageID, ContentType: "application/json", DeliveryMode: amqp.Persistent,
			Timestamp: time.Now(), AppId: "poller", Body: []byte(r.content),
		})
		if err != nil {
			return 0, fmt.Errorf("publishing: %w", err)
		}
	}
	failed := map[string]string{}
	for i, dc := range confirms {
		ack, err := dc.WaitContext(ctx)
		if err != nil {
			return 0, err
		}
		if !ack {
			failed[rows[i].messageID] = "nacked by the broker"
		}
	}
	// basic.return comes before the ack of the same message.
	for len(returns) > 0 {
		r := <-returns
		failed[r.MessageId] = fmt.Sprintf("returned: %d %s", r.ReplyCode, r.ReplyText)
	}
	var sent []any
	for _, r := range rows {
		if reason, bad := failed[r.messageID]; bad {
			if err := p.exec(ctx, p.db, "UPDATE producer_message SET status = 'PENDING', retry_count = retry_count + 1, next_retry_time = NOW(3) + INTERVAL 5 SECOND, error_msg = ?, version = version + 1 WHERE id = ? AND status = 'SENDING'", reason, r.id); err != nil {
				return 0, fmt.Errorf("recording a failed publish: %w", err)
			}
			continue
		}
		sent = append(sent, r.id)
	}
	if len(sent) > 0 {
		q := "UPDATE producer_message SET status = 'SENT', version = version + 1 WHERE id IN (" + placeholders(len(sent)) + ") AND status = 'SENDING'"
		if err := p.exec(ctx, p.db, q, sent...); err != nil {
			return 0, fmt.Errorf("marking rows SENT: %w", err)
		}
	}
	p.published.Add(int64(len(sent)))
	return len(rows), nil
}

// claim takes up to batch due rows and moves them to SENDING.
func (p *poller) claim(ctx context.Context) ([]claimed, error) {
	p.stmts.Add(1)
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("starting the claim: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	p.stmts.Add(1)
	rs, err := tx.QueryContext(ctx, "SELECT id, message_id, exchange, routing_key, content FROM producer_message"+
		" WHERE status = 'PENDING' AND next_retry_time <= NOW(3)"+
		" ORDER BY status, next_retry_time, id LIMIT ? FOR UPDATE SKIP LOCKED", p.batch)
	if err != nil {
		return nil, fmt.Errorf("selecting due rows: %w", err)
	}
	var out []claimed
	var ids []any
	for rs.Next() {
		var c claimed
		if err := rs.Scan(&c.id, &c.messageID, &c.exchange, &c.key, &c.content); err != nil {
			rs.Close()
			return nil, err
		}
		out = append(out, c)
		ids = append(ids, c.id)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, err
	}
	if len(out) > 0 {
		if err := p.exec(ctx, tx, "UPDATE producer_message SET status = 'SENDING', version = version + 1 WHERE id IN ("+placeholders(len(ids))+")", ids...); err != nil {
			return nil, fmt.Errorf("claiming rows: %w", err)
		}
	}
	p.stmts.Add(1)
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("committing the claim: %w", err)
	}
	return out, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

// hashTopology declares the consumer side of per-key order
// (docs/ordering.md): a consistent-hash exchange hashing the header that
// carries the key, into n queues with a single active consumer each.
func hashTopology(t *testing.T, header string, n int) (string, []string) {
	t.Helper()
	_, ch := testenv.Dial(t)
	ex := testenv.UniqueName("chx")
	if err := ch.ExchangeDeclare(ex, "x-consistent-hash", true, false, false, false, amqp.Table{"hash-header": header}); err != nil {
		t.Fatalf("declaring a consistent-hash exchange (plugin rabbitmq_consistent_hash_exchange, which scripts/stack.sh up enables): %v", err)
	}
	queues := make([]string, n)
	for i := range queues {
		queues[i] = testenv.UniqueName(fmt.Sprintf("chq%d", i))
		if _, err := ch.QueueDeclare(queues[i], true, false, false, false, amqp.Table{"x-single-active-consumer": true}); err != nil {
			t.Fatal(err)
		}
		// The binding key of a consistent-hash exchange is the queue's weight.
		if err := ch.QueueBind(queues[i], "1", ex, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(ex, false, false)
	})
	return ex, queues
}

// Per-key order end to end: local_message rows keyed by biz_id go out on 4
// lanes to a consistent-hash exchange hashing the biz_id header into 4
// single-active-consumer queues, each consumed through pkg/inbox (one
// worker per consumer, a standby consumer beside it). Every event is
// applied once, and the events of each biz_id in commit order.
func TestConsistentHashQueuesKeepKeyOrderThroughTheInbox(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/local_message.sql", "schema/consumer_message.sql")
	db.Exec(t, `CREATE TABLE applied (id BIGINT AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64) NOT NULL,
		biz_id VARCHAR(64) NOT NULL, n INT NOT NULL, queue INT NOT NULL)`)
	ex, queues := hashTopology(t, "biz_id", 4)
	consumer := testenv.UniqueName("orders")
	for qi, q := range queues {
		apply := func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			var ev struct {
				Key string `json:"key"`
				N   int    `json:"n"`
			}
			if err := json.Unmarshal(m.Body, &ev); err != nil {
				return inbox.Malformed(err)
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO applied (message_id, biz_id, n, queue) VALUES (?, ?, ?, ?)", m.ID, ev.Key, ev.N, qi)
			return err
		}
		for range 2 { // the active consumer and a standby
			relaytest.StartInbox(t, inbox.Config{URL: testenv.AMQPURL, Queue: q, ConsumerName: consumer, Workers: 1,
				DisableRetryTask: true, DisableRetention: true}, db.Primary, apply, zap.NewNop())
		}
	}
	relaytest.StartRelay(t, relaytest.Config{Name: testenv.UniqueName("lanes_hash"),
		Tables:      fmt.Sprintf("  - {preset: local-message, schema: %s, route: {partition_key: biz_id}}\n", db.Name),
		RelayFields: "lanes: 4"}.YAML())

	const txs, perTx, keys = 100, 20, 40
	n := 0
	for i := 0; i < txs; i++ {
		var b strings.Builder
		b.WriteString("INSERT INTO local_message (biz_id, biz_type, exchange, routing_key, message_body) VALUES ")
		for j := 0; j < perTx; j++ {
			n++
			key := fmt.Sprintf("order-%02d", (i*7+j*3)%keys)
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s', 'order', '%s', 'order.created', '{\"key\":\"%s\",\"n\":%d}')", key, ex, key, n)
		}
		db.Exec(t, b.String())
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return db.Count(t, "SELECT COUNT(*) FROM applied") >= n },
		"applied %d of %d events", db.Count(t, "SELECT COUNT(*) FROM applied"), n)

	rows, err := db.Primary.Query("SELECT message_id, biz_id, n, queue FROM applied ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	last, queueOf, perQueue, seen := map[string]int{}, map[string]int{}, make([]int, len(queues)), map[string]bool{}
	for rows.Next() {
		var id, key string
		var seq, q int
		if err := rows.Scan(&id, &key, &seq, &q); err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("message %s applied twice", id)
		}
		seen[id] = true
		if seq < last[key] {
			t.Fatalf("%s: event %d applied after event %d", key, seq, last[key])
		}
		if q0, ok := queueOf[key]; ok && q0 != q {
			t.Fatalf("%s: events in queues %d and %d", key, q0, q)
		}
		last[key], queueOf[key] = seq, q
		perQueue[q]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d distinct events applied, want %d", len(seen), n)
	}
	for q, c := range perQueue {
		if c == 0 {
			t.Errorf("queue %d got nothing: %v events per queue", q, perQueue)
		}
	}
	t.Logf("%d events of %d keys applied in order, per queue %v", n, keys, perQueue)
	testenv.Eventually(t, 20*time.Second, func() bool { return db.Count(t, "SELECT COUNT(*) FROM local_message WHERE status = 1") == n },
		"%d rows SENT, want %d", db.Count(t, "SELECT COUNT(*) FROM local_message WHERE status = 1"), n)
}

package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// BenchmarkInboxThroughput measures messages per second through the whole inbox (AMQP
// delivery, one transaction with the inbox row and a trivial handler, ACK) against the
// real servers. The queue is filled first, so only consumption is timed. Run it with a
// fixed count, e.g. -bench InboxThroughput -benchtime 20000x.
func BenchmarkInboxThroughput(b *testing.B) {
	e := newTestEnv(b)
	msgs := make([]amqp.Publishing, 0, b.N)
	for i := 0; i < b.N; i++ {
		msgs = append(msgs, amqp.Publishing{MessageId: fmt.Sprintf("bench-%d", i), Body: []byte(`{"n":1}`)})
	}
	for len(msgs) > 0 {
		n := min(len(msgs), 5000)
		e.publishMany(msgs[:n])
		msgs = msgs[n:]
	}
	trivial := func(context.Context, *sql.Tx, Message) error { return nil }
	cfg := e.config()
	cfg.Workers = 16
	counters := &Counters{}
	c, err := New(cfg, e.db, trivial, nil, WithMetrics(counters))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	b.ResetTimer()
	start := time.Now()
	go func() { done <- c.Run(ctx) }()
	testenv.WaitFor(b, 10*time.Minute, "all messages processed", func() (bool, string) {
		s := counters.Snapshot()
		return s.Processed == int64(b.N), fmt.Sprintf("%+v", s)
	})
	elapsed := time.Since(start)
	b.StopTimer()

	cancel()
	if err := <-done; err != nil {
		b.Fatalf("Run: %v", err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

package publisher

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// BenchmarkPublishRabbitMQ drains b.N 1 KiB messages through one Publisher
// to the stack's RabbitMQ, to a bound exchange and to a missing one (which
// must cost about as little: the passive check is cached).
func BenchmarkPublishRabbitMQ(b *testing.B) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		b.Fatalf("connecting: %v", err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	ex := fmt.Sprintf("pubbench_%d", time.Now().UnixNano())
	if err := ch.ExchangeDeclare(ex, "fanout", false, true, false, false, nil); err != nil {
		b.Fatal(err)
	}
	q, _ := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-max-length": int32(1000)})
	_ = ch.QueueBind(q.Name, "", ex, false, nil)
	for _, target := range []struct{ name, exchange string }{{"bound", ex}, {"missing", ex + "_missing"}} {
		b.Run(target.name, func(b *testing.B) {
			p, err := New(Config{URL: amqpURL}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			in, out := make(chan Job[string], 1024), make(chan Result[string], 1024)
			go func() { _ = Stream[string]{p}.Run(ctx, in, out) }()
			body := make([]byte, 1024)
			b.ResetTimer()
			go func() {
				for i := range b.N {
					in <- Job[string]{Msg: &router.Message{Exchange: target.exchange, RoutingKey: "k",
						Publishing: amqp.Publishing{MessageId: fmt.Sprint(i), DeliveryMode: amqp.Persistent, Body: body}}}
				}
			}()
			for range b.N {
				<-out
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

package streamlane_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/streamlane"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// logs are every lane's log lines, for the secrets check. One observer
// for the whole binary: the stream client's log goes to the first lane's
// logger for good, which must outlive every test.
var (
	logCore, logs = observer.New(zap.DebugLevel)
	testLog       = zap.New(logCore)
)

// config is a lane's config on a fresh stream (deleted when the test ends)
// with a fresh producer name.
func config(t *testing.T) streamlane.Config {
	t.Helper()
	cfg := streamlane.Config{
		URIs:           []string{streamURI(streamAddr())},
		Stream:         testenv.UniqueName("relay_stream"),
		ProducerName:   testenv.UniqueName("relay"),
		ConnectTimeout: 10 * time.Second,
	}
	t.Cleanup(func() { deleteStream(t, cfg.Stream) })
	return cfg
}

func newLane(t *testing.T, cfg streamlane.Config) *streamlane.Lane[int] {
	t.Helper()
	l, err := streamlane.New[int](cfg, testLog)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// message is row i as the router makes it.
func message(i int) *router.Message {
	return &router.Message{
		Exchange:   "ignored",
		RoutingKey: fmt.Sprintf("order.%d", i%10),
		Publishing: amqp091.Publishing{
			MessageId:   fmt.Sprintf("m-%d", i),
			ContentType: "application/json",
			Timestamp:   time.Unix(1700000000+int64(i), 0),
			Body:        []byte(fmt.Sprintf(`{"id":%d}`, i)),
			Headers: amqp091.Table{
				"table": "orders", "n": int32(i), "even": i%2 == 0,
				"nested": amqp091.Table{"left": "out"}, // not a simple value: left out
			},
		},
	}
}

// jobs are messages from..to (publishing ids equal to the row number),
// with a marker before the first and after every markEvery-th message.
// Tags number the jobs in order.
func jobs(from, to, markEvery int) []publisher.Job[int] {
	var out []publisher.Job[int]
	add := func(j publisher.Job[int]) { j.Tag = len(out); out = append(out, j) }
	add(publisher.Job[int]{})
	for i := from; i <= to; i++ {
		add(publisher.Job[int]{Msg: message(i), Seq: uint64(i)})
		if markEvery > 0 && (i-from+1)%markEvery == 0 {
			add(publisher.Job[int]{})
		}
	}
	return out
}

// run is a Run of the lane over js: it feeds them (in closed after the
// last), collects the results, and returns them with Run's error. Each
// wait has the deadline d.
func run(t *testing.T, l *streamlane.Lane[int], js []publisher.Job[int], d time.Duration) ([]publisher.Result[int], error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	in := make(chan publisher.Job[int])
	out := make(chan publisher.Result[int], 64)
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx, in, out) }()
	go func() {
		defer close(in)
		for _, j := range js {
			select {
			case in <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	var results []publisher.Result[int]
	for {
		select {
		case r := <-out:
			results = append(results, r)
		case err := <-done:
			for {
				select {
				case r := <-out:
					results = append(results, r)
				default:
					return results, err
				}
			}
		case <-ctx.Done():
			t.Fatalf("Run did not return within %s (%d results)", d, len(results))
		}
	}
}

// checkInOrder checks that the results are the jobs, in order, each
// message confirmed and each marker unchanged.
func checkInOrder(t *testing.T, js []publisher.Job[int], results []publisher.Result[int]) {
	t.Helper()
	if len(results) != len(js) {
		t.Fatalf("%d results for %d jobs", len(results), len(js))
	}
	for i, r := range results {
		if r.Job.Tag != i {
			t.Fatalf("result %d is job %d's: out of order", i, r.Job.Tag)
		}
		if r.Err != nil {
			t.Fatalf("result %d (publishing id %d): %v", i, r.Job.Seq, r.Err)
		}
		if (r.Job.Msg == nil) != (js[i].Msg == nil) || r.Job.Seq != js[i].Seq {
			t.Fatalf("result %d is not its job unchanged", i)
		}
	}
}

// checkStream checks that the stream holds rows from..to, each once, in
// order, mapped as toStream maps them.
func checkStream(t *testing.T, got []testenv.StreamMessage, from, to int) {
	t.Helper()
	if want := to - from + 1; len(got) != want {
		seen := map[string]int{}
		dups := 0
		for _, r := range got {
			if seen[r.ID]++; seen[r.ID] == 2 {
				dups++
			}
		}
		t.Fatalf("stream holds %d messages (%d distinct, %d duplicated), want %d", len(got), len(seen), dups, want)
	}
	for k, r := range got {
		i := from + k
		want := message(i)
		if r.ID != want.Publishing.MessageId || r.Body != string(want.Publishing.Body) {
			t.Fatalf("stream message %d is %s %q, want %s %q", k, r.ID, r.Body, want.Publishing.MessageId, want.Publishing.Body)
		}
		routingKey, _ := r.Props[streamlane.RoutingKeyProperty].(string)
		if routingKey != want.RoutingKey || r.ContentType != "application/json" ||
			!r.Created.Equal(want.Publishing.Timestamp) {
			t.Fatalf("stream message %s: routing key %q, content type %q, created %s", r.ID, routingKey, r.ContentType, r.Created)
		}
		if r.Props["table"] != "orders" || r.Props["n"] != int64(i) || r.Props["even"] != (i%2 == 0) {
			t.Fatalf("stream message %s: application properties %v", r.ID, r.Props)
		}
		if _, has := r.Props["nested"]; has {
			t.Fatalf("stream message %s: a table header became an application property", r.ID)
		}
	}
}

// noSecret fails the test when a log line or the error shows secret.
func noSecret(t *testing.T, secret string, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("an error shows the password: %v", err)
		}
	}
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += fmt.Sprintf(" %s=%v", k, v)
		}
		if strings.Contains(line, secret) {
			t.Fatalf("a log line shows the password: %s", line)
		}
	}
}

func streamAddr() string                        { return testenv.StreamAddr() }
func streamURI(addr string) string              { return testenv.StreamURI(addr) }
func streamPort() int                           { return testenv.StreamPort() }
func adminEnv(t *testing.T) *stream.Environment { return testenv.StreamEnv(t) }
func deleteStream(t *testing.T, name string)    { testenv.DeleteStream(t, name) }
func readStream(t *testing.T, name string, d time.Duration) []testenv.StreamMessage {
	return testenv.ReadStream(t, name, d)
}

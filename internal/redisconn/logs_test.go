package redisconn

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// go-redis's own messages come out as JSON entries of the relay's log, not
// as plain-text lines in the stream.
func TestRedisLogsGoThroughZap(t *testing.T) {
	var buf bytes.Buffer
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zap.DebugLevel)
	RouteLogs(zap.New(core))
	t.Cleanup(func() { RouteLogs(zap.NewNop()) })

	// Nothing listens on port 1: go-redis reports the failed dial itself.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Ping(ctx).Err()
	// And it warns about a sub-millisecond expiry it rounds up.
	_ = c.Set(ctx, "k", "v", 500*time.Microsecond).Err()

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var msgs []string
	for _, l := range lines {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("a line of the log is not JSON: %q", l)
		}
		if e["logger"] != "redis" || e["level"] != "warn" {
			t.Fatalf("entry %v: want logger redis, level warn", e)
		}
		msgs = append(msgs, e["msg"].(string))
	}
	all := strings.Join(msgs, "\n")
	if !strings.Contains(all, "failed to dial") || !strings.Contains(all, "truncating to 1ms") {
		t.Fatalf("go-redis messages missing from the zap log:\n%s", buf.String())
	}
}

// go-redis repeats a failed dial on every attempt: the log has one line per
// message a minute, and the next one says how many it left out.
func TestRedisLogsRepeatOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zap.DebugLevel)
	clock := time.Unix(1_700_000_000, 0)
	l := newRedisLogger(zap.New(core), time.Minute)
	l.now = func() time.Time { return clock }
	ctx := context.Background()
	for range 22 { // a 20 s outage's worth
		l.Printf(ctx, "redis: connection pool: failed to dial after %d attempts: %s", 5, "connection refused")
	}
	l.Printf(ctx, "redis: another message")
	clock = clock.Add(61 * time.Second)
	l.Printf(ctx, "redis: connection pool: failed to dial after %d attempts: %s", 5, "connection refused")

	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if len(got) != 3 || got[0]["repeated"] != nil || got[1]["msg"] != "another message" || got[2]["repeated"] != float64(21) {
		t.Fatalf("log lines %v; want the dial failure once, the other message, then the dial failure with repeated=21", got)
	}
}

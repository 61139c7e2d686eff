package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewRedis connects to the stack's Redis and returns the client and a key
// prefix of the test's own ("inbox_test_..._:"); the keys under it are
// deleted and the client closed when the test ends.
func NewRedis(t testing.TB, prefix string) (*redis.Client, string) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: RedisAddr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis unreachable at %s (set RELAY_TEST_REDIS_ADDR): %v", RedisAddr, err)
	}
	keys := UniqueName(prefix) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, keys+"*", 100).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
		_ = client.Close()
	})
	return client, keys
}

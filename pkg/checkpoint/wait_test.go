package checkpoint_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// A save WithWait that fewer replicas acknowledged still counts (the
// master holds it) and is reported; a fenced save that was refused is not
// reported, since nothing was written. The stack's Redis has no replicas.
func TestSaveWithWaitReportsShortAcks(t *testing.T) {
	testenv.Integration(t)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	t.Cleanup(func() { _ = rc.Close() })
	key := testenv.UniqueName("waitcp") + ":checkpoint"
	fenceKey := key + ":leader"
	t.Cleanup(func() { rc.Del(ctx, key, fenceKey) })
	var short []error
	wait := checkpoint.WithWait(1, 50*time.Millisecond, func(err error) { short = append(short, err) })

	if err := checkpoint.NewRedis(rc, key, wait).Save(ctx, cp("0-1-10")); err != nil {
		t.Fatalf("save: %v", err)
	}
	if got, err := checkpoint.NewRedis(rc, key).Load(ctx); err != nil || got.GTIDSet != "0-1-10" {
		t.Fatalf("loaded %+v (%v)", got, err)
	}
	if len(short) != 1 || !strings.Contains(short[0].Error(), "0 of 1 replicas acknowledged within 50ms") {
		t.Fatalf("reported %v, want one save short of its replica", short)
	}

	rc.Set(ctx, fenceKey, "7:a", 0)
	fenced := checkpoint.NewRedis(rc, key, checkpoint.WithFence(fence{fenceKey, "7:a"}), wait)
	if err := fenced.Save(ctx, cp("0-1-20")); err != nil {
		t.Fatalf("fenced save: %v", err)
	}
	stale := checkpoint.NewRedis(rc, key, checkpoint.WithFence(fence{fenceKey, "6:b"}), wait)
	if err := stale.Save(ctx, cp("0-1-30")); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("stale save: %v, want ErrFenced", err)
	}
	if got, _ := fenced.Load(ctx); got.GTIDSet != "0-1-20" || len(short) != 2 {
		t.Fatalf("checkpoint %s, %d reports (want 0-1-20 and 2: the refused save is not one)", got.GTIDSet, len(short))
	}
}

type fence struct{ key, token string }

func (f fence) FenceKey() string   { return f.key }
func (f fence) FenceToken() string { return f.token }

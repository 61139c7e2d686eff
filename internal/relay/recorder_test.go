package relay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// A relay stopped while idle writes its position back at the stop: the
// store may have lost it (a Redis restart, a deleted key), and the next
// start must not take a gap.
func TestIdleStopSavesThePositionItStartedAt(t *testing.T) {
	tb := markedTable(t)
	p := startPipeline(t, tb, &fakeReader{}, &fakeLane{})
	if err := p.stop(t); err != nil {
		t.Fatal(err)
	}
	if cps := p.j.checkpoints(); len(cps) != 1 || cps[0] != 4 {
		t.Fatalf("checkpoints saved %v; want the start position (4) once, at the stop", cps)
	}
}

// flakyStore fails its first saves and keeps the ones that land.
type flakyStore struct {
	mu        sync.Mutex
	failUntil time.Time
	failed    time.Time // first failure
	landed    []checkpoint.Checkpoint
}

func (s *flakyStore) Save(_ context.Context, c checkpoint.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Now().Before(s.failUntil) {
		if s.failed.IsZero() {
			s.failed = time.Now()
		}
		return errors.New("store down")
	}
	s.landed = append(s.landed, c)
	return nil
}

// A checkpoint held while the store is down carries, once it lands, the
// time it was saved, not the time the hold began.
func TestHeldCheckpointSavedAtIsWhenItLanded(t *testing.T) {
	tb := markedTable(t)
	rt, err := router.New([]*outbox.Table{tb}, router.WithAppID("relay-test"))
	if err != nil {
		t.Fatal(err)
	}
	store := &flakyStore{failUntil: time.Now().Add(700 * time.Millisecond)}
	j := &journal{}
	reader := &fakeReader{events: script(tb, func(int) string { return "k" }, tx{100, []int{1}})}
	r := mustNew(t, Config{FlushInterval: 2 * time.Millisecond, CheckpointInterval: 2 * time.Millisecond},
		reader, rt, []Lane{&fakeLane{}}, &fakeMarker{j: j}, store, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, binlog.Position{Flavor: binlog.FlavorMariaDB, File: "bin.000001", Pos: 4}) }()
	defer func() { cancel(); <-done }()
	waitFor(t, 10*time.Second, func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.landed) > 0
	}, "no checkpoint landed")
	store.mu.Lock()
	defer store.mu.Unlock()
	cp := store.landed[0]
	if cp.Pos != 100 || !cp.SavedAt.After(store.failUntil.Add(-time.Millisecond)) {
		t.Fatalf("landed %+v; want position 100 saved after the store came back (%s), not when the hold began (%s)",
			cp, store.failUntil.UTC(), store.failed.UTC())
	}
}

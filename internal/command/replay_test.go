package command

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/replay"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// A replay refused by its flags or its table is a usage error, before
// anything connects.
func TestReplayRefusedBeforeConnecting(t *testing.T) {
	e := Env{Cfg: &config.Config{Tables: []*outbox.Table{table("shop", "outbox", true), table("billing", "outbox", true)}}}
	cases := []struct {
		o    ReplayOptions
		want string
	}{
		{ReplayOptions{Table: "shop.outbox", ChunkSize: 0, Samples: 5, ProgressEvery: time.Second}, "replay: --chunk-size 0 is not between 1 and 100000"},
		{ReplayOptions{ChunkSize: 10, Samples: 5, ProgressEvery: time.Second},
			"replay: several tables are configured; name one with --table (shop.outbox, billing.outbox)"},
	}
	for _, c := range cases {
		sum, err := Replay(context.Background(), e, c.o, io.Discard, io.Discard)
		var ue *replay.UsageError
		if sum != nil || !errors.As(err, &ue) || err.Error() != c.want {
			t.Errorf("%+v: got %v, %v; want the usage error %q", c.o, sum, err, c.want)
		}
	}
}

func TestReplayKey(t *testing.T) {
	e := Env{Cfg: &config.Config{Name: "t"}}
	tb := table("shop", "outbox", true)
	live, archive := e.replayKey(tb, false), e.replayKey(tb, true)
	if !strings.HasSuffix(live, "shop.outbox") || archive != live+":archive" {
		t.Errorf("keys %q and %q", live, archive)
	}
}

func TestPrintSummary(t *testing.T) {
	cases := []struct {
		name string
		s    replay.Summary
		want string
	}{
		{"dry run", replay.Summary{DryRun: true, Total: 2, Source: "shop.outbox", Range: "ids 1-2", Destination: "each row's own route",
			Samples: []replay.Sample{{ID: "1", MessageID: "m1", Exchange: "x", RoutingKey: "k", OriginalPublished: "2024-05-01T10:00:00Z"}}},
			"dry run: 2 rows of shop.outbox would be replayed (ids 1-2) to each row's own route\n" +
				"  id 1  message_id m1  exchange x  routing_key k  first sent 2024-05-01T10:00:00Z\n"},
		{"done", replay.Summary{ID: "r1", Source: "shop.outbox", Range: "ids 1-2", Destination: "x", Total: 2, Published: 2, ThisRun: 2, Elapsed: 2 * time.Second, Cursor: "2"},
			"replay r1 done: shop.outbox, ids 1-2, to x\n" +
				"  published 2, failed 0, of 2 rows; this run 2 rows in 2s (1 rows/s); last id 2\n"},
		{"interrupted with failures", replay.Summary{ID: "r1", Source: "shop.outbox", Range: "all", Destination: "x", Total: 10, Published: 3, Failed: 2,
			ThisRun: 5, FailedIDs: []string{"4", "5"}, Interrupted: true, Cursor: "5"},
			"replay r1 interrupted: shop.outbox, all, to x\n" +
				"  published 3, failed 2, of 10 rows; this run 5 rows in 0s (0 rows/s); last id 5\n" +
				"  failed ids (first 2): 4, 5; replay them with --ids once the cause is fixed\n" +
				"  progress saved under KEY: continue with --resume\n"},
	}
	for _, c := range cases {
		var b strings.Builder
		printSummary(&b, &c.s, "KEY")
		if b.String() != c.want {
			t.Errorf("%s: printed\n%s\nwant\n%s", c.name, b.String(), c.want)
		}
	}
}

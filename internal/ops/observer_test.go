package ops

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func TestMetricsCheckpointInfoLineIsSpaced(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	o := &opsObserver{Metrics: metrics.New(), log: zap.New(core), last: time.Now().Add(-time.Minute)}
	tb := &outbox.Table{Schema: "shop", Name: "producer_message"}
	for range 3 {
		o.Published(tb, "orders", time.Millisecond, time.Second)
	}
	o.Failed(tb, "orders", publisher.ErrNacked)
	for i := range 50 {
		o.Checkpointed(checkpoint.Checkpoint{GTIDSet: "0-1-9", File: "binlog.000001", Pos: uint32(100 + i), SavedAt: time.Now()})
	}
	lines := logs.FilterMessage("checkpoint saved").All()
	if len(lines) != 1 {
		t.Fatalf("%d info lines for 50 saves in a moment, want 1", len(lines))
	}
	f := lines[0].ContextMap()
	if f["published"] != int64(3) || f["failed"] != int64(1) || f["binlog_pos"] != uint32(100) || f["gtid"] != "0-1-9" {
		t.Errorf("checkpoint line fields: %v", f)
	}
}

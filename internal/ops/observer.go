package ops

// What the pipeline reports as it settles rows: the metrics, and an info
// line about checkpoints now and then.

import (
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// checkpointLogEvery spaces the info line about checkpoints: saves happen
// every checkpoint.interval (1 s by default), far too often for info.
const checkpointLogEvery = 30 * time.Second

// NewObserver is the relay.Observer the pipeline reports to: it feeds m,
// and logs to log.
func NewObserver(m *metrics.Metrics, log *zap.Logger) relay.Observer {
	return &opsObserver{Metrics: m, log: log, last: time.Now()}
}

// opsObserver feeds the metrics and writes one info line about checkpoints
// every checkpointLogEvery. Its calls come from the settle stage only.
type opsObserver struct {
	*metrics.Metrics
	log               *zap.Logger
	last              time.Time
	published, failed int64
}

var _ relay.Observer = (*opsObserver)(nil)

func (o *opsObserver) Published(t *outbox.Table, exchange string, confirm, sinceCommit time.Duration) {
	o.Metrics.Published(t, exchange, confirm, sinceCommit)
	o.published++
}

func (o *opsObserver) Failed(t *outbox.Table, exchange string, reason error) {
	o.Metrics.Failed(t, exchange, reason)
	o.failed++
}

func (o *opsObserver) Checkpointed(cp checkpoint.Checkpoint) {
	o.Metrics.Checkpointed(cp)
	if since := time.Since(o.last); since >= checkpointLogEvery {
		o.log.Info("checkpoint saved", zap.String("gtid", cp.GTIDSet), zap.String("binlog_file", cp.File),
			zap.Uint32("binlog_pos", cp.Pos), zap.Int64("published", o.published), zap.Int64("failed", o.failed),
			zap.Duration("period", since.Round(time.Second)))
		o.last, o.published, o.failed = time.Now(), 0, 0
	}
}

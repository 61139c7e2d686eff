package sweeper

import (
	"context"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// inBatches runs batch until one comes back short of size (the work is
// done), pausing between batches, and returns the rows and batches done.
func inBatches(ctx context.Context, size int, pause time.Duration, batch func() (int64, error)) (total int64, batches int, err error) {
	for {
		n, err := batch()
		if err != nil {
			return total, batches, err
		}
		total += n
		batches++
		if n < int64(size) {
			return total, batches, nil
		}
		if err := backoff.Sleep(ctx, pause); err != nil {
			return total, batches, err
		}
	}
}

package relay

import (
	"context"

	"golang.org/x/sync/semaphore"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// budget bounds the bytes of the rows between the router and the settle
// stage (the jobs channel, the publisher's window and the results channel):
// the router takes a row's weight before handing it on and the committer gives
// it back once the row is settled, so a backlog of large payloads waits in
// the binlog, not in memory. A row heavier than the whole budget takes all
// of it and passes alone: it waits for the rows ahead to settle, and nothing
// else enters until it is settled, but it never deadlocks.
type budget struct {
	sem   *semaphore.Weighted
	total int64
}

func newBudget(total int64) *budget {
	return &budget{sem: semaphore.NewWeighted(total), total: total}
}

// acquire waits for w bytes (capped at the whole budget) and returns what it
// took, to be released later.
func (b *budget) acquire(ctx context.Context, w int64) (int64, error) {
	w = min(max(w, 1), b.total)
	if err := b.sem.Acquire(ctx, w); err != nil {
		return 0, err
	}
	return w, nil
}

func (b *budget) release(w int64) {
	if w > 0 {
		b.sem.Release(w)
	}
}

// rowOverhead stands for what a row costs beyond its values' bytes (the
// row, its map, the message and its properties), so a stream of tiny rows
// is bounded too.
const rowOverhead = 512

// rowWeight is what a row holds in memory while in flight: its values and
// the message body built from them.
func rowWeight(row *outbox.Row, msg *router.Message) int64 {
	w := int64(rowOverhead)
	for k, v := range row.Values {
		w += int64(len(k)) + 16
		switch x := v.(type) {
		case []byte:
			w += int64(len(x))
		case string:
			w += int64(len(x))
		}
	}
	if msg != nil {
		w += int64(len(msg.Publishing.Body)) + int64(len(msg.Exchange)+len(msg.RoutingKey)+len(msg.Publishing.MessageId))
		for k, v := range msg.Publishing.Headers {
			w += int64(len(k)) + 16
			if s, ok := v.(string); ok {
				w += int64(len(s))
			}
		}
	}
	return w
}

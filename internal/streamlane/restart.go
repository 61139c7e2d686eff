package streamlane

// The lanes as the relay's pipeline runs them: restarted from the
// checkpoint after a failure, their producers named per lane, and the
// scope of their publishing ids.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// Restarting is a Lane as the relay's pipeline runs it: its Run ends in a
// *Failure when the lane fails, after which the pipeline starts again from
// its checkpoint (a stream lane never reconnects by itself).
type Restarting[T any] struct {
	*Lane[T]
}

// Republished: a stream lane publishes again only under the same ids,
// which the broker drops; none is a possible duplicate.
func (Restarting[T]) Republished() uint64 { return 0 }

// Run is the lane's Run, its failure marked as a *Failure.
//
// A failed lane hands on only the results before its first unconfirmed
// one: neither that message nor anything behind it (a marker, a message
// confirmed later) is handed on. The unconfirmed messages are no failure
// of their rows (each may be on the stream already), and a commit marker
// behind one must never reach the committer, or the checkpoint would pass
// a row whose outcome is unknown (invariant 2). The pipeline stops with the
// lane and starts again from the last checkpoint that every earlier row
// allows, so those rows are replayed under the same publishing ids.
func (s Restarting[T]) Run(ctx context.Context, in <-chan publisher.Job[T], out chan<- publisher.Result[T]) error {
	mid := make(chan publisher.Result[T])
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		cut := false
		for res := range mid {
			if cut = cut || errors.Is(res.Err, ErrUnconfirmed); cut {
				continue
			}
			select {
			case out <- res:
			case <-ctx.Done():
				for range mid { // the pipeline stops: let the lane finish
				}
				return
			}
		}
	}()
	err := s.Lane.Run(ctx, in, mid)
	close(mid)
	<-forwarded
	var guard *guardStop
	switch {
	case errors.As(err, &guard):
		return guard.err // the lease is lost: no restart
	case err != nil && ctx.Err() == nil:
		return &Failure{err}
	}
	return err
}

// Failure is a stream lane that failed (the broker or the connection to
// it): the binlog path starts again from its last checkpoint, and the rows
// it replays keep their publishing ids, so the broker drops the ones it
// stored.
type Failure struct{ err error }

func (e *Failure) Error() string { return "stream lane: " + e.err.Error() }
func (e *Failure) Unwrap() error { return e.err }

// ProducerName is lane i's producer name: the relay's name, and with
// several lanes the lane and their number, so a change of relay.lanes gives
// new names (a key's rows move to another lane: the old names' stored ids
// would drop rows the new lane has not published).
func ProducerName(name string, i, n int) string {
	if n == 1 {
		return name
	}
	return fmt.Sprintf("%s-lane-%d-of-%d", name, i, n)
}

// Scope names what the publishing ids count: the tables read, the lanes,
// the stream, and numbering, every other input that decides which rows
// the reader emits (binlog.Numbering: the emit rules' version, the
// transaction buffer limits, each table's publishable statuses and time
// zone). A checkpoint saved under another scope does not resume its ids:
// the next Run starts above the broker's last stored id, so a change of
// any of them costs duplicates in the stream, never a row dropped as one.
func Scope(tables []string, lanes int, stream, numbering string) string {
	tables = slices.Clone(tables)
	slices.Sort(tables)
	h := sha256.Sum256(fmt.Appendf(nil, "tables=%s lanes=%d stream=%s numbering=%s",
		strings.Join(tables, ","), lanes, stream, numbering))
	return hex.EncodeToString(h[:8])
}

package app

// The binlog path into a RabbitMQ stream (broker.stream): one stream lane per
// relay lane, each a named producer the broker deduplicates by, and the
// publishing ids' scope and floor (internal/relay/seq.go).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/streamlane"
)

// streamLane is a stream lane as the health and metrics endpoints see it.
type streamLane struct {
	*streamlane.Lane[relay.Ticket]
}

// Republished: a stream lane publishes again only under the same ids,
// which the broker drops; none is a possible duplicate.
func (streamLane) Republished() uint64 { return 0 }

// Run is the lane's Run, its failure marked as one the stream restarts
// after (run.go): a stream lane never reconnects by itself.
//
// The messages a failed lane gives back unconfirmed are not handed on: they
// are no failure of their rows (each may be on the stream already), and the
// pipeline stops with the lane, so they are replayed from the checkpoint
// under the same publishing ids.
func (s streamLane) Run(ctx context.Context, in <-chan publisher.Job[relay.Ticket], out chan<- publisher.Result[relay.Ticket]) error {
	mid := make(chan publisher.Result[relay.Ticket])
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		for res := range mid {
			if errors.Is(res.Err, streamlane.ErrUnconfirmed) {
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
	if err != nil && ctx.Err() == nil {
		return &streamFailure{err}
	}
	return err
}

// streamFailure is a stream lane that failed (the broker or the connection
// to it): the binlog path starts again from its last checkpoint, and the
// rows it replays keep their publishing ids, so the broker drops the ones
// it stored.
type streamFailure struct{ err error }

func (e *streamFailure) Error() string { return "stream lane: " + e.err.Error() }
func (e *streamFailure) Unwrap() error { return e.err }

// streamProducer is lane i's producer name: the relay's name, and with
// several lanes the lane and their number, so a change of relay.lanes gives
// new names (a key's rows move to another lane: the old names' stored ids
// would drop rows the new lane has not published).
func streamProducer(name string, i, n int) string {
	if n == 1 {
		return name
	}
	return fmt.Sprintf("%s-lane-%d-of-%d", name, i, n)
}

func (a *App) newStreamLanes() (publishers, error) {
	cfg := a.Cfg
	uris, err := cfg.Broker.StreamURIs()
	if err != nil {
		return nil, err
	}
	btls, err := cfg.Broker.TLS.TLSConfig("broker")
	if err != nil {
		return nil, err
	}
	n := max(cfg.Relay.Lanes, 1)
	out := make(publishers, n)
	for i := range out {
		log := a.Log.Named("stream")
		if n > 1 {
			log = log.With(zap.Int("lane", i))
		}
		sc := streamlane.Config{URIs: uris, TLS: btls, Stream: cfg.Broker.Stream.Name,
			MaxLengthBytes: cfg.Broker.Stream.MaxLengthBytes, MaxAge: cfg.Broker.Stream.MaxAge,
			ProducerName: streamProducer(cfg.Name, i, n), Window: cfg.Broker.Window, ConnectionName: streamProducer(cfg.Name, i, n)}
		l, err := streamlane.New[relay.Ticket](sc, log)
		if err != nil {
			return nil, err
		}
		out[i] = streamLane{l}
	}
	return out, nil
}

// seqScope names what the publishing ids count: the tables read, the
// lanes and the stream. A checkpoint saved under another scope does not
// resume its ids. Empty without a stream.
func (a *App) seqScope() string {
	cfg := a.Cfg
	if !cfg.Broker.Stream.Enabled() {
		return ""
	}
	tables := make([]string, len(cfg.Tables))
	for i, t := range cfg.Tables {
		tables[i] = t.FullName()
	}
	slices.Sort(tables)
	h := sha256.Sum256(fmt.Appendf(nil, "tables=%s lanes=%d stream=%s", strings.Join(tables, ","), max(cfg.Relay.Lanes, 1), cfg.Broker.Stream.Name))
	return hex.EncodeToString(h[:8])
}

// raiseSeqFloor asks each stream lane's producer for the last publishing id
// the broker stored: a Run that cannot resume the ids of a checkpoint
// starts above them, so no row is dropped as a duplicate of another.
func (a *App) raiseSeqFloor(ctx context.Context, r *relay.Relay, lanes publishers) error {
	for _, p := range lanes {
		l, ok := p.(streamLane)
		if !ok {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		last, err := l.LastPublishingID(qctx)
		cancel()
		if err != nil {
			return fmt.Errorf("broker.stream: reading the last publishing id stored on stream %s: %w", a.Cfg.Broker.Stream.Name, err)
		}
		r.RaiseSeqFloor(last)
	}
	return nil
}

// checkStreamPort is `check`'s probe of broker.stream: the stream port
// answers and tells the last publishing id stored for the first lane's
// producer (the stream need not exist yet: the relay declares it).
func (a *App) checkStreamPort(ctx context.Context) (uint64, error) {
	lanes, err := a.newStreamLanes()
	if err != nil {
		return 0, err
	}
	qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return lanes[0].(streamLane).LastPublishingID(qctx)
}

package app

// The binlog path into a RabbitMQ stream (broker.stream): one stream lane per
// relay lane, each a named producer the broker deduplicates by, and the
// publishing ids' scope and floor (internal/relay/seq.go).

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/lanes"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/streamlane"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

func (w *wiring) streamLanes() (lanes.Set, error) {
	cfg := w.cfg
	uris, err := cfg.Broker.StreamURIs()
	if err != nil {
		return nil, err
	}
	btls, err := cfg.Broker.TLS.TLSConfig("broker")
	if err != nil {
		return nil, err
	}
	n := max(cfg.Relay.Lanes, 1)
	out := make(lanes.Set, n)
	for i := range out {
		log := w.log.Named("stream")
		if n > 1 {
			log = log.With(zap.Int("lane", i))
		}
		sc := streamlane.Config{URIs: uris, TLS: btls, Stream: cfg.Broker.Stream.Name,
			MaxLengthBytes: cfg.Broker.Stream.MaxLengthBytes, MaxAge: cfg.Broker.Stream.MaxAge,
			ProducerName: streamlane.ProducerName(cfg.Name, i, n), Window: cfg.Broker.Window, ConnectionName: streamlane.ProducerName(cfg.Name, i, n),
			ConfirmTimeout: cfg.Broker.Stream.ConfirmTimeout}
		l, err := streamlane.New[relay.Ticket](sc, log)
		if err != nil {
			return nil, err
		}
		out[i] = streamlane.Restarting[relay.Ticket]{Lane: l}
	}
	return out, nil
}

// seqScope names what the publishing ids count (streamlane.Scope), the
// reader's numbering inputs included (binlog.Numbering); empty without a
// stream.
func (w *wiring) seqScope() string {
	cfg := w.cfg
	if !cfg.Broker.Stream.Enabled() {
		return ""
	}
	tables := make([]string, len(cfg.Tables))
	for i, t := range cfg.Tables {
		tables[i] = t.FullName()
	}
	return streamlane.Scope(tables, max(cfg.Relay.Lanes, 1), cfg.Broker.Stream.Name,
		binlog.Numbering(readerConfig(cfg), cfg.Tables))
}

// raiseSeqFloor asks each stream lane's producer for the last publishing id
// the broker stored: a Run that cannot resume the ids of a checkpoint
// starts above them, so no row is dropped as a duplicate of another.
func (w *wiring) raiseSeqFloor(ctx context.Context, r *relay.Relay, set lanes.Set) error {
	for _, p := range set {
		l, ok := p.(streamlane.Restarting[relay.Ticket])
		if !ok {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		last, err := l.LastPublishingID(qctx)
		cancel()
		if err != nil {
			return fmt.Errorf("broker.stream: reading the last publishing id stored on stream %s: %w", w.cfg.Broker.Stream.Name, err)
		}
		r.RaiseSeqFloor(last)
	}
	return nil
}

// checkStreamPort is `check`'s probe of broker.stream: the stream port
// answers and tells the last publishing id stored for the first lane's
// producer (the stream need not exist yet: the relay declares it).
func (w *wiring) checkStreamPort(ctx context.Context) (uint64, error) {
	set, err := w.streamLanes()
	if err != nil {
		return 0, err
	}
	qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return set[0].(streamlane.Restarting[relay.Ticket]).LastPublishingID(qctx)
}

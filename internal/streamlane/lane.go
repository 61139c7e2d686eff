package streamlane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// Failure reasons. Each message's result error wraps one of these.
var (
	// ErrRefused: the message was refused before it was sent (a
	// publishing id the broker would drop, a message over the frame size);
	// it is not on the stream. The lane goes on.
	ErrRefused = errors.New("refused before publishing")
	// ErrUnconfirmed: the lane failed (see the error's text) with this
	// message not confirmed. It may be on the stream or not: publishing it
	// again with the same publishing id is safe either way.
	ErrUnconfirmed = errors.New("not confirmed by the broker")
	// ErrRunning: Run was called while another Run of the lane goes on.
	ErrRunning = errors.New("the lane is already running")
)

// Lane publishes jobs tagged T (the caller's type, handed back in each
// result) to one stream through one named producer. It runs one Run at a
// time; Run may be called again after it returned.
type Lane[T any] struct {
	cfg     Config
	log     *zap.Logger
	secrets []string

	// dial opens the producer of a Run: the stream client's (open), or a
	// fake's (NewWith).
	dial Dial

	running   atomic.Bool
	connected atomic.Bool
	// guard, when set, is asked before each message is sent (SetGuard).
	guard atomic.Pointer[func() error]

	// skipped holds the header names already warned about (left out of
	// the application properties), so each is warned of once.
	skippedMu sync.Mutex
	skipped   map[string]bool
}

// New builds a lane, with cfg's zero fields defaulted; an invalid cfg is an
// error naming the field. Run connects. The first lane built also sends
// the stream client's log lines to log (see installClientLog).
func New[T any](cfg Config, log *zap.Logger) (*Lane[T], error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.URIs = append([]string(nil), cfg.URIs...)
	l := &Lane[T]{cfg: cfg, log: log.With(zap.String("stream", cfg.Stream)), secrets: passwords(cfg.URIs),
		skipped: map[string]bool{}}
	l.dial = func(ctx context.Context) (Producer, error) { return open(ctx, &l.cfg, l.log, l.secrets) }
	installClientLog(log, l.secrets)
	return l, nil
}

// NewWith builds a lane that publishes through the producers dial opens,
// one per Run, rather than through the stream client: the lane's state
// machine over a fake broker (streamlanetest), for tests. cfg's URIs may be
// empty; LastPublishingID is not served.
func NewWith[T any](cfg Config, dial Dial, log *zap.Logger) (*Lane[T], error) {
	if len(cfg.URIs) == 0 {
		cfg.URIs = []string{"rabbitmq-stream://fake:5552"}
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Lane[T]{cfg: cfg, log: log.With(zap.String("stream", cfg.Stream)), dial: dial, skipped: map[string]bool{}}, nil
}

// SetGuard makes the lane ask guard before each message it sends; an error
// ends Run with that error (not a *Failure: the pipeline must not restart),
// nothing more sent. A leader whose lease ran out must not publish the
// jobs already queued in its lane when it wakes from a pause.
func (l *Lane[T]) SetGuard(guard func() error) { l.guard.Store(&guard) }

func (l *Lane[T]) guarded() error {
	if g := l.guard.Load(); g != nil && *g != nil {
		if err := (*g)(); err != nil {
			return &guardStop{err}
		}
	}
	return nil
}

// guardStop is the guard's error, which Restarting returns as it is.
type guardStop struct{ err error }

func (e *guardStop) Error() string { return e.err.Error() }
func (e *guardStop) Unwrap() error { return e.err }

// Connected reports whether the producer is up.
func (l *Lane[T]) Connected() bool { return l.connected.Load() }

// Holding reports no hold: a stream lane never holds the stream behind a
// message; a failure fails the lane (see the package doc).
func (l *Lane[T]) Holding() (publisher.Hold, bool) { return publisher.Hold{}, false }

// Run connects, declares the stream (when missing) and the producer, then
// publishes the jobs from in and sends their results to out in the order
// the jobs came, until in is closed and everything is settled (it returns
// nil), ctx ends (ctx.Err(); results already settled are handed over if out
// has room, the rest never are: those rows are replayed and deduplicated),
// or the lane fails (every job taken and not settled comes out failed, in
// order, then Run returns the cause). It never reconnects: the caller runs
// it again. Opening fails before any job is taken.
func (l *Lane[T]) Run(ctx context.Context, in <-chan publisher.Job[T], out chan<- publisher.Result[T]) error {
	if !l.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer l.running.Store(false)
	s, err := l.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	l.connected.Store(true)
	l.log.Info("stream producer up", zap.String("producer", l.cfg.ProducerName), zap.String("broker", s.Broker()))
	snd := newSender(s, l.cfg.Window, l.cfg.MaxFrameBytes)
	err = newMachine(ctx, l, s, snd, in, out).run()
	l.connected.Store(false)
	if err != nil && ctx.Err() == nil {
		// The lane failed, often on a broker or network that does not
		// answer (a confirm timeout): closing it would wait out each
		// close's deadline, with nothing published meanwhile and a
		// SIGTERM then finding the pipeline still down. Every result is
		// out, so the close goes on in the background, within the same
		// deadlines, and the caller may run the lane again at once (what
		// the old connection still delivers carries the same publishing
		// ids as the replay, so the broker stores each once, in order).
		go func() {
			snd.stop(l.cfg.ConnectTimeout)
			s.Close(context.WithoutCancel(ctx))
		}()
		return err
	}
	snd.stop(l.cfg.ConnectTimeout)
	s.Close(ctx)
	return err
}

// LastPublishingID asks the broker for the last publishing id stored for
// the producer name on the stream: 0 when none is (a new name, or no
// stream yet). The relay uses it when it starts from a position it has no
// publishing id for: ids above it are stored, the others dropped.
func (l *Lane[T]) LastPublishingID(ctx context.Context) (uint64, error) {
	env, _, err := openEnv(ctx, &l.cfg, l.secrets)
	if err != nil {
		return 0, err
	}
	defer func() {
		_, _ = within(context.WithoutCancel(ctx), l.cfg.ConnectTimeout, "closing the environment",
			func() (struct{}, error) { return struct{}{}, env.Close() }, nil)
	}()
	id, err := within(ctx, l.cfg.ConnectTimeout, "querying the last publishing id", func() (int64, error) {
		return env.QuerySequence(l.cfg.ProducerName, l.cfg.Stream)
	}, nil)
	switch {
	case errors.Is(err, stream.StreamDoesNotExist):
		return 0, nil
	case err != nil:
		return 0, scrub(fmt.Errorf("last publishing id of producer %s on stream %s: %w",
			l.cfg.ProducerName, l.cfg.Stream, err), l.secrets)
	case id < 0:
		return 0, nil
	}
	return uint64(id), nil
}

// warnSkipped warns once per header name left out of a message.
func (l *Lane[T]) warnSkipped(names []string, messageID string) {
	l.skippedMu.Lock()
	var fresh []string
	for _, n := range names {
		if !l.skipped[n] && len(l.skipped) < 1024 {
			l.skipped[n] = true
			fresh = append(fresh, n)
		}
	}
	l.skippedMu.Unlock()
	if len(fresh) > 0 {
		l.log.Warn("headers left out of stream messages: an application property holds only simple values"+
			" (string, number, bool, time, bytes); warned once per header",
			zap.Strings("headers", fresh), zap.String("message_id", messageID))
	}
}

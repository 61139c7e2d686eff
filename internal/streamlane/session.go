package streamlane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"go.uber.org/zap"
)

// ErrTimeout: a call into the client did not return within
// Config.ConnectTimeout and was abandoned.
var ErrTimeout = errors.New("no answer in time")

// outcome is what a call returned.
type outcome[R any] struct {
	r   R
	err error
}

// within runs f with a deadline (and ctx): some calls of the client never
// return while the broker is away (the environment's locator reconnects
// in a loop without end; a dial has no timeout). An abandoned call goes on
// in its goroutine, and what it returns then is handed to cleanup.
func within[R any](ctx context.Context, d time.Duration, what string, f func() (R, error), cleanup func(R)) (R, error) {
	done := make(chan outcome[R], 1)
	go func() {
		r, err := f()
		done <- outcome[R]{r, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	var zero R
	select {
	case res := <-done:
		return res.r, res.err
	case <-t.C:
		go abandon(done, cleanup)
		return zero, fmt.Errorf("%s: %w after %s", what, ErrTimeout, d)
	case <-ctx.Done():
		go abandon(done, cleanup)
		return zero, fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

func abandon[R any](done <-chan outcome[R], cleanup func(R)) {
	if res := <-done; res.err == nil && cleanup != nil {
		cleanup(res.r)
	}
}

// session is one environment and its producer: what one Run publishes
// through.
type session struct {
	cfg      *Config
	log      *zap.Logger
	secrets  []string
	env      *stream.Environment
	producer *stream.Producer
	confirms stream.ChannelPublishConfirm
	closes   stream.ChannelClose
	// conv is confirms converted (Confirms); stopConv ends the conversion
	// at close, which then drains confirms.
	conv     chan []Confirm
	stopConv chan struct{}
	// to is the URI that answered (redacted), for logs and errors.
	to string
}

// The session is the lane's Producer in the binary.
var _ Producer = (*session)(nil)

func (s *session) Send(batch []message.StreamMessage) error { return s.producer.BatchSend(batch) }
func (s *session) Confirms() <-chan []Confirm               { return s.conv }
func (s *session) Closed() <-chan stream.Event              { return s.closes }
func (s *session) Close(ctx context.Context)                { s.close(ctx) }
func (s *session) Broker() string                           { return s.to }

// convert hands the client's confirms to the machine as Confirms until the
// client closes them or the session closes.
func (s *session) convert() {
	defer close(s.conv)
	for sts := range s.confirms {
		select {
		case s.conv <- toConfirms(sts):
		case <-s.stopConv:
			for range s.confirms { // the client's close reports what is unconfirmed here
			}
			return
		}
	}
}

// openEnv connects to the first URI that answers and returns its
// environment. Without DialAdvertised each URI gets an environment of its
// own whose address resolver is that URI's host and port, so the producer
// dials the address that answered rather than the one the broker
// advertises (a container's hostname, a node behind a load balancer).
func openEnv(ctx context.Context, cfg *Config, secrets []string) (*stream.Environment, string, error) {
	var errs []error
	for _, raw := range cfg.URIs {
		ep, err := parseURI(raw)
		if err != nil {
			return nil, "", err // Validate passed it: not reached
		}
		opts := stream.NewEnvironmentOptions().
			SetUri(raw).
			SetRPCTimeout(cfg.ConnectTimeout).
			SetRequestedMaxFrameSize(cfg.MaxFrameBytes).
			SetMaxProducersPerClient(1)
		if cfg.TLS != nil {
			opts = opts.SetTLSConfig(cfg.TLS)
		}
		if !cfg.DialAdvertised {
			opts = opts.SetAddressResolver(stream.AddressResolver{Host: ep.host, Port: ep.port})
		}
		env, err := within(ctx, cfg.ConnectTimeout, "connecting to "+ep.addr(), func() (*stream.Environment, error) {
			env, err := stream.NewEnvironment(opts)
			if err != nil && env != nil {
				_ = env.Close()
			}
			return env, err
		}, func(env *stream.Environment) { _ = env.Close() })
		if err == nil {
			return env, publisher.Redact(raw), nil
		}
		// Scrubbed before the redacted URI joins it: a password that is
		// also the user name ("guest") is cut out of the client's text only.
		errs = append(errs, fmt.Errorf("%s: %w", publisher.Redact(raw), scrub(err, secrets)))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", errors.Join(errs...)
}

// open connects, declares the stream and the producer. Each step has the
// connect deadline.
func open(ctx context.Context, cfg *Config, log *zap.Logger, secrets []string) (*session, error) {
	env, to, err := openEnv(ctx, cfg, secrets)
	if err != nil {
		return nil, err
	}
	s := &session{cfg: cfg, log: log, secrets: secrets, env: env, to: to}
	opts := stream.NewStreamOptions().SetMaxAge(cfg.MaxAge)
	if cfg.MaxLengthBytes > 0 {
		opts = opts.SetMaxLengthBytes(stream.ByteCapacity{}.B(cfg.MaxLengthBytes))
	}
	// Declared only when missing: RabbitMQ refuses a declare of a stream
	// there with other arguments (PRECONDITION_FAILED), and the client
	// always sends one (queue-leader-locator), so a stream an operator made
	// would be refused. Two lanes declaring at once are fine: the client
	// takes STREAM_ALREADY_EXISTS as success.
	if _, err := within(ctx, cfg.ConnectTimeout, "declaring the stream", func() (struct{}, error) {
		if exists, err := env.StreamExists(cfg.Stream); err != nil || exists {
			return struct{}{}, err
		}
		return struct{}{}, env.DeclareStream(cfg.Stream, opts)
	}, nil); err != nil {
		s.close(ctx)
		return nil, s.fail("declaring stream %s: %w", cfg.Stream, err)
	}
	popts := stream.NewProducerOptions().
		SetProducerName(cfg.ProducerName).
		SetClientProvidedName(cfg.ConnectionName).
		// The client's own queue and unconfirmed map block past this size;
		// the window keeps them at half of it.
		SetQueueSize(max(500, 2*cfg.Window)).
		// The client times out confirms too (a status with an error); ours
		// (the machine's timer) comes first, within the same bound.
		SetConfirmationTimeOut(cfg.ConfirmTimeout)
	p, err := within(ctx, cfg.ConnectTimeout, "declaring the producer", func() (*stream.Producer, error) {
		return env.NewProducer(cfg.Stream, popts)
	}, func(p *stream.Producer) { _ = p.Close() })
	if err != nil {
		s.close(ctx)
		return nil, s.fail("declaring producer %s on stream %s: %w", cfg.ProducerName, cfg.Stream, err)
	}
	s.producer = p
	// Both before the first send: the client sends confirms only to a
	// channel it was given.
	s.confirms = p.NotifyPublishConfirmation()
	s.closes = p.NotifyClose()
	s.conv, s.stopConv = make(chan []Confirm), make(chan struct{})
	go s.convert()
	return s, nil
}

func (s *session) fail(format string, args ...any) error {
	return scrub(fmt.Errorf(format, args...), s.secrets)
}

// close closes the producer and the environment, within the connect
// deadline even when ctx has ended (a close is owed to the broker). The
// client's producer close reports every message still unconfirmed as
// failed (after waiting up to 2.5 s for them): the machine has settled or
// failed them all before this.
func (s *session) close(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if s.stopConv != nil {
		// Nobody else reads the confirms now, and the client's close
		// reports what is unconfirmed there: a send it would block on
		// forever, holding the producer's lock. convert drains them.
		close(s.stopConv)
	}
	if s.producer != nil {
		p := s.producer
		_, err := within(ctx, s.cfg.ConnectTimeout, "closing the producer", func() (struct{}, error) {
			err := p.Close()
			if errors.Is(err, stream.AlreadyClosed) {
				err = nil
			}
			return struct{}{}, err
		}, nil)
		if err != nil {
			s.log.Debug("closing the stream producer", zap.Error(scrub(err, s.secrets)))
		}
	}
	env := s.env
	if _, err := within(ctx, s.cfg.ConnectTimeout, "closing the environment", func() (struct{}, error) {
		return struct{}{}, env.Close()
	}, nil); err != nil {
		s.log.Debug("closing the stream environment", zap.Error(scrub(err, s.secrets)))
	}
}

// frameOverhead is what a publish frame adds to its messages: the length
// prefix, key, version, producer id and count (4+2+2+1+4), and per
// message its publishing id and length (8+4).
const (
	frameHeader     = 4 + 2 + 2 + 1 + 4
	perMessageBytes = 8 + 4
)

// outgoing is one message for the sender.
type outgoing struct {
	msg  encoded
	size int // on the frame, perMessageBytes included
}

// sender writes messages to the producer with BatchSend, off the
// machine's goroutine: a write blocks while the broker does not read (a
// memory alarm blocks publishers), and the machine must go on taking
// confirms and ctx. BatchSend and not Send: Send goes through a queue of
// the client whose close can race a send into a closed channel; BatchSend
// writes under the socket's lock and fails cleanly on a closed producer.
// Each batch is what was queued, as much as one frame holds.
type sender struct {
	producer Producer
	maxFrame int
	in       chan outgoing
	errs     chan error // the first send error; later ones are the same failure
	done     chan struct{}
}

func newSender(p Producer, window, maxFrame int) *sender {
	s := &sender{producer: p, maxFrame: maxFrame, in: make(chan outgoing, window),
		errs: make(chan error, 1), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *sender) run() {
	defer close(s.done)
	var (
		batch   []message.StreamMessage
		pending *outgoing
		failed  bool
	)
	for {
		var first outgoing
		if pending != nil {
			first, pending = *pending, nil
		} else {
			var ok bool
			if first, ok = <-s.in; !ok {
				return
			}
		}
		batch = append(batch[:0], first.msg)
		size := frameHeader + first.size
	fill:
		for size < s.maxFrame {
			select {
			case o, ok := <-s.in:
				if !ok {
					break fill
				}
				if size+o.size > s.maxFrame {
					pending = &o
					break fill
				}
				batch = append(batch, o.msg)
				size += o.size
			default:
				break fill
			}
		}
		if failed {
			continue // the machine fails them: the lane has failed
		}
		if err := s.producer.Send(batch); err != nil {
			failed = true
			s.errs <- fmt.Errorf("publishing %d messages from publishing id %d: %w",
				len(batch), batch[0].GetPublishingId(), err)
		}
	}
}

// stop ends the sender once it has written what it was given, or at the
// deadline (a write blocked on a broker that does not read).
func (s *sender) stop(d time.Duration) {
	close(s.in)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
	}
}

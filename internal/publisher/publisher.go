// Package publisher publishes routed messages to RabbitMQ in order, with
// publisher confirms and mandatory routing, and reports each one's outcome in
// the order the messages were given. It owns the connection: when the broker
// goes away it reconnects with backoff and republishes every message not yet
// confirmed, so a caller only ever sees "routed" or a definite failure.
//
// Every broker outcome is settled per message: a return, a nack, a channel
// the broker closed over one publish (403, 404, 406) or a frame it could not
// take fails that message with the broker's reply, and the stream goes on;
// only a failure of the connection itself reconnects. Messages that break an
// AMQP limit, or that RabbitMQ would refuse per message (406), fail before
// they are sent, and the first publish to an exchange on a connection goes
// alone (probe.go), so the refusals that can be foreseen never cost another
// message in flight a republish and a possible duplicate. A message that must not fail
// (Job.MustDeliver, or any message in strict mode) goes to the dead-letter
// exchange or holds the stream, reported by Holding, until it is delivered.
// Strict mode publishes one message at a time; strict per key (PerKey, for
// one lane of several) keeps the window open but never has two messages of
// one Job.Key unconfirmed, so a failed message is overtaken only by other
// keys. The work is an explicit state machine (machine.go), one method per
// event.
package publisher

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Config is the broker connection and the confirm window.
type Config struct {
	URL string
	// URLs are the nodes of one RabbitMQ cluster, instead of URL: the
	// publisher connects to one at a time and, when it fails, to the next
	// (nodes.go).
	URLs []string
	TLS  *tls.Config
	// Window bounds messages published but not yet confirmed.
	Window int
	// MaxMessageSize refuses bodies the broker would refuse (RabbitMQ closes
	// the channel on them, which would otherwise loop). 0, the default, is
	// the broker's default max_message_size by the version it announces:
	// 16 MiB on RabbitMQ 4, 128 MiB on 3.x. Set it where the broker's
	// max_message_size was changed.
	MaxMessageSize int
	ReconnectMin   time.Duration
	ReconnectMax   time.Duration
	// ConnectionName shows in the RabbitMQ management UI.
	ConnectionName string
	// Strict holds the stream on a failed message and retries it in place
	// (with HoldBackoff) instead of
	// reporting the failure: no later message overtakes it. Only one
	// message is in flight at a time, which bounds throughput to one
	// broker round trip per message.
	Strict bool
	// PerKey (with Strict) keeps the window open: instead of one message
	// at a time, at most one message per Job.Key is unconfirmed, so a
	// failed message is never overtaken by one of its own key, only by
	// messages of other keys already in flight. The stream still holds
	// behind it. This is strict ordering per key, for one lane of several.
	PerKey bool
	// HoldBackoff spaces the attempts while the stream holds behind one
	// message (relay.hold_backoff).
	HoldBackoff HoldBackoff
	// DeadLetterExchange receives a MustDeliver message the broker refused
	// (with the reason and its original exchange and routing key in
	// headers). Empty: such a message holds the stream and is retried with
	// HoldBackoff until the broker takes it.
	DeadLetterExchange string
}

// HoldBackoff is relay.hold_backoff: the wait between attempts at a held
// message, doubling from Base up to Max; a delivered message resets it.
type HoldBackoff struct {
	Base time.Duration
	Max  time.Duration
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	c.Window = cmp.Or(c.Window, 1024)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, 200*time.Millisecond)
	c.ReconnectMax = cmp.Or(c.ReconnectMax, 10*time.Second)
	c.ConnectionName = cmp.Or(c.ConnectionName, "binlog-relay")
	c.HoldBackoff.Base = cmp.Or(c.HoldBackoff.Base, time.Second)
	c.HoldBackoff.Max = cmp.Or(c.HoldBackoff.Max, time.Minute)
	if c.Strict && !c.PerKey {
		c.Window = 1
	}
}

// Validate reports every bad field, by its YAML key; it expects Defaults
// to have filled the zero ones. Errors never carry a URL (nor so its
// password).
func (c *Config) Validate() error {
	errs := c.validateNodes() // nodes.go
	if c.Window < 1 {
		errs = append(errs, errors.New("broker.window: must be at least 1"))
	}
	if c.MaxMessageSize < 0 {
		errs = append(errs, fmt.Errorf("broker.max_message_bytes: %d must be positive", c.MaxMessageSize))
	} else if c.MaxMessageSize > maxMessageCeiling {
		errs = append(errs, fmt.Errorf("broker.max_message_bytes: %d is over RabbitMQ's ceiling of 512 MiB (536870912)", c.MaxMessageSize))
	}
	if err := c.HoldBackoff.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// maxMessageCeiling is the largest max_message_size RabbitMQ accepts.
const maxMessageCeiling = 512 << 20

// validate checks relay.hold_backoff. A bound left unset follows retry:
// (internal/app), so max is checked first: a base derived from a negative
// max is not the user's mistake.
func (h HoldBackoff) validate() error {
	switch {
	case h.Max < 0:
		return errors.New("relay.hold_backoff.max: must not be negative")
	case h.Base < 0:
		return errors.New("relay.hold_backoff.base: must not be negative")
	case h.Base == 0 || h.Max < h.Base:
		return fmt.Errorf("relay.hold_backoff: base %s and max %s must be positive, base at most max", h.Base, h.Max)
	}
	return nil
}

// Redact hides the password of a URL, for logs and errors.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable url>"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	return u.String()
}

// Job is one unit in the ordered stream: a message to publish, or (Msg nil)
// a marker that only keeps its place in the order. Tag is the caller's, of
// the caller's type T, and comes back unchanged in the job's Result.
type Job[T any] struct {
	Msg *router.Message
	Tag T
	// MustDeliver marks a message whose failure cannot be recorded (its
	// table has no status column): a failure never reaches the caller as a
	// result; the message goes to the dead-letter exchange or holds the
	// stream until it is delivered.
	MustDeliver bool
	// Key is the hash of the message's ordering key, for Config.PerKey.
	Key uint64
	// Seq is the message's publishing id on a RabbitMQ stream lane
	// (internal/streamlane): the same for the same row on every replay and
	// increasing in binlog order. AMQP lanes ignore it.
	Seq uint64
}

// Result is a job's outcome: Err nil means confirmed by the broker and routed
// to at least one queue.
type Result[T any] struct {
	Job Job[T]
	Err error
	// Latency is publish-to-confirm time of the last publish (zero for
	// markers and refused messages).
	Latency time.Duration
	// DeadLettered: the message was refused and went to the dead-letter
	// exchange instead (Err is nil; Reason says why).
	DeadLettered bool
	Reason       string
}

// Hold describes the message the stream is held behind (strict ordering, or
// a MustDeliver message with no dead-letter exchange): for readiness,
// metrics and logs.
type Hold struct {
	MessageID  string
	Exchange   string
	RoutingKey string
	Reason     string
	Since      time.Time
	Attempts   int
	// Lane names the lane held ("lane 2 of 4"), set by a relay with
	// several; empty with one.
	Lane string
}

// Failure reasons. Each result error wraps one of these.
var (
	ErrReturned = errors.New("returned by the broker as unroutable")
	ErrNacked   = errors.New("nacked by the broker")
	ErrTooLarge = errors.New("message too large")
	// ErrNoExchange: publishing to a missing exchange is a channel error in
	// AMQP 0-9-1 (404), not a return; exchanges are checked before use so
	// one bad row cannot close the channel for every other.
	ErrNoExchange = errors.New("exchange does not exist")
	// ErrRefused: the broker refused this one message with a channel error
	// (403 access refused, 406 precondition failed, a frame error); the
	// error text carries the broker's reply code and text.
	ErrRefused = errors.New("refused by the broker")
	// ErrFieldTooLong: a name or header over an AMQP limit (shortstr 255
	// bytes, content header over frame_max); never truncated.
	ErrFieldTooLong = errors.New("over an AMQP limit")
)

// Publisher is a single ordered publishing channel.
type Publisher struct {
	cfg       Config
	log       *zap.Logger
	connected atomic.Bool
	hold      atomic.Pointer[Hold]
	dial      dialFunc
	// node is the redacted URL of the node in use, nodeAt its index in
	// Config.Nodes (nodes.go).
	node      atomic.Pointer[string]
	nodeAt    atomic.Int32
	exchanges *exchangeCache
	warn      *warnLimiter
	// republished counts messages published again after their fate on a
	// lost channel was unknown (see Republished).
	republished atomic.Uint64
	// guard, when set, is asked before each publish (SetGuard).
	guard atomic.Pointer[func() error]
}

// SetGuard makes the publisher ask guard before each message it writes to
// the broker; an error ends Run with that error, nothing more written. A
// leader whose lease ran out must not publish the jobs already queued in
// its lane (up to relay.buffer and the window) when it wakes from a pause:
// checking only where rows enter the pipeline lets them through.
func (p *Publisher) SetGuard(guard func() error) { p.guard.Store(&guard) }

// guarded is the guard's answer (nil without one).
func (p *Publisher) guarded() error {
	if g := p.guard.Load(); g != nil && *g != nil {
		return (*g)()
	}
	return nil
}

// New builds a publisher, with cfg's zero fields defaulted; an invalid cfg
// is an error naming the field. Run connects.
func New(cfg Config, log *zap.Logger) (*Publisher, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, log: log, exchanges: newExchangeCache(4096), warn: newWarnLimiter(log, 10*time.Second)}
	p.dial = p.dialAMQP
	return p, nil
}

// Connected reports whether the broker connection is up.
func (p *Publisher) Connected() bool { return p.connected.Load() }

// Republished counts the messages published again because an earlier
// publish of theirs had an unknown fate: they were unconfirmed when the
// connection was lost, or when the broker closed the channel over a
// refusal it did not pin on one message (an exchange deleted, or a
// permission revoked, after it was proven). The broker may have routed the
// earlier copy, so each is a possible duplicate; a consumer's inbox absorbs
// it.
func (p *Publisher) Republished() uint64 { return p.republished.Load() }

// Holding reports the message the stream is held behind, if any.
func (p *Publisher) Holding() (Hold, bool) {
	h := p.hold.Load()
	if h == nil {
		return Hold{}, false
	}
	return *h, true
}

// Stream is a Publisher seen as the publisher of jobs tagged T, the
// caller's type: Go methods take no type parameters, so the tag type is
// fixed here (publisher.Stream[relay.Ticket]{Publisher: p}) and a result
// hands the caller's tag back without a type assertion.
type Stream[T any] struct{ *Publisher }

// Run publishes jobs from in and sends their results to out, in order, until
// ctx ends or in is closed and everything is settled. The work is done by a
// machine (machine.go), one method per event. A Publisher runs one stream
// at a time.
func (s Stream[T]) Run(ctx context.Context, in <-chan Job[T], out chan<- Result[T]) error {
	return newMachine(ctx, s.Publisher, in, out).run()
}

// Scrub makes sure an error never carries the URL's password.
func Scrub(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr != nil || u.User == nil {
		return err
	}
	pw, has := u.User.Password()
	if !has || pw == "" {
		return err
	}
	return redactedError{err: err, secret: pw}
}

type redactedError struct {
	err    error
	secret string
}

func (r redactedError) Error() string {
	return strings.ReplaceAll(r.err.Error(), r.secret, "xxxxx")
}
func (r redactedError) Unwrap() error { return r.err }

// Package publisher publishes routed messages to RabbitMQ in order, with
// publisher confirms and mandatory routing, and reports each one's outcome in
// the order the messages were given. It owns the connection: when the broker
// goes away it reconnects with backoff and republishes every message not yet
// confirmed, so a caller only ever sees "routed" or a definite failure.
package publisher

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Config is the broker connection and the confirm window.
type Config struct {
	URL string
	TLS *tls.Config
	// Window bounds messages published but not yet confirmed.
	Window int
	// MaxMessageSize refuses bodies the broker would refuse (RabbitMQ closes
	// the channel on them, which would otherwise loop); 128 MiB by default,
	// RabbitMQ's max_message_size.
	MaxMessageSize int
	ReconnectMin   time.Duration
	ReconnectMax   time.Duration
	// ConnectionName shows in the RabbitMQ management UI.
	ConnectionName string
	// Strict holds the stream on a failed message and retries it in place
	// (with backoff between StrictRetryMin and StrictRetryMax) instead of
	// reporting the failure: no later message overtakes it. Only one
	// message is in flight at a time, which bounds throughput to one
	// broker round trip per message.
	Strict         bool
	StrictRetryMin time.Duration
	StrictRetryMax time.Duration
	// DeadLetterExchange receives a MustDeliver message the broker refused
	// (with the reason and its original exchange and routing key in
	// headers). Empty: such a message holds the stream and is retried with
	// backoff (StrictRetryMin..StrictRetryMax) until the broker takes it.
	DeadLetterExchange string
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.Window == 0 {
		c.Window = 1024
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 128 << 20
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 200 * time.Millisecond
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 10 * time.Second
	}
	if c.ConnectionName == "" {
		c.ConnectionName = "binlog-relay"
	}
	if c.StrictRetryMin == 0 {
		c.StrictRetryMin = time.Second
	}
	if c.StrictRetryMax == 0 {
		c.StrictRetryMax = time.Minute
	}
	if c.Strict {
		c.Window = 1
	}
}

// Validate names the field at fault.
func (c *Config) Validate() error {
	if c.URL == "" {
		return errors.New("broker.url: required")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		return fmt.Errorf("broker.url: %s is not an amqp:// or amqps:// URL", Redact(c.URL))
	}
	if c.Window < 1 {
		return errors.New("broker.window: must be at least 1")
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
// a marker that only keeps its place in the order. Tag is the caller's.
type Job struct {
	Msg *router.Message
	Tag any
	// MustDeliver marks a message whose failure cannot be recorded (its
	// table has no status column): a failure never reaches the caller as a
	// result; the message goes to the dead-letter exchange or holds the
	// stream until it is delivered.
	MustDeliver bool
}

// Result is a job's outcome: Err nil means confirmed by the broker and routed
// to at least one queue.
type Result struct {
	Job Job
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

// errHold stops settling while strict mode holds a failed message.
var errHold = errors.New("holding a failed message for retry")

// Publisher is a single ordered publishing channel.
type Publisher struct {
	cfg       Config
	log       *zap.Logger
	connected atomic.Bool
	hold      atomic.Pointer[Hold]
}

// New builds a publisher; Run connects.
func New(cfg Config, log *zap.Logger) *Publisher {
	cfg.Defaults()
	return &Publisher{cfg: cfg, log: log}
}

// Connected reports whether the broker connection is up.
func (p *Publisher) Connected() bool { return p.connected.Load() }

// Holding reports the message the stream is held behind, if any.
func (p *Publisher) Holding() (Hold, bool) {
	h := p.hold.Load()
	if h == nil {
		return Hold{}, false
	}
	return *h, true
}

type entry struct {
	job       Job
	seq       uint64 // delivery tag on the current channel; 0 = not published
	published bool
	sentAt    time.Time
	refused   error // set when the message was refused before sending
}

// settleable reports whether an unpublished entry can be settled as soon as
// it reaches the head: a marker, or a message refused before sending.
func (e *entry) settleable() bool { return !e.published && (e.job.Msg == nil || e.refused != nil) }

// session is one channel in confirm mode.
type session struct {
	conn     *amqp.Connection
	ch       *amqp.Channel
	confirms chan amqp.Confirmation
	returns  chan amqp.Return
}

func (s *session) close() {
	if s == nil {
		return
	}
	_ = s.ch.Close()
	_ = s.conn.Close()
}

// Run publishes jobs from in and sends their results to out, in order, until
// ctx ends or in is closed and everything is settled.
func (p *Publisher) Run(ctx context.Context, in <-chan Job, out chan<- Result) error {
	var (
		sess     *session
		inflight []*entry // in job order; head is the oldest unsettled
		msgs     int      // published entries in inflight
		returned = map[string]string{}
		backoff  = p.cfg.ReconnectMin
		inOpen   = true
		// exchanges verified to exist on the current connection
		known = map[string]bool{}
	)
	defer func() { sess.close(); p.connected.Store(false) }()

	// Strict mode: a failed message goes back to the head and is retried
	// after holdBackoff; nothing behind it moves meanwhile.
	var (
		holdTimer   <-chan time.Time
		holdBackoff = p.cfg.StrictRetryMin
	)
	emit := func(r Result) error {
		if p.cfg.Strict && r.Err != nil && r.Job.Msg != nil {
			p.log.Warn("publish failed; strict ordering holds the stream and retries it",
				zap.String("message_id", r.Job.Msg.Publishing.MessageId), zap.String("exchange", r.Job.Msg.Exchange),
				zap.Error(r.Err), zap.Duration("retry_in", holdBackoff))
			inflight = append([]*entry{{job: r.Job}}, inflight...)
			holdTimer = time.After(holdBackoff)
			holdBackoff = min(holdBackoff*2, p.cfg.StrictRetryMax)
			return errHold
		}
		if r.Job.Msg != nil && r.Err == nil {
			holdBackoff = p.cfg.StrictRetryMin
		}
		select {
		case out <- r:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// settleHead emits leading markers and jobs that failed before publishing.
	settleHead := func() error {
		for len(inflight) > 0 && inflight[0].settleable() {
			e := inflight[0]
			inflight = inflight[1:]
			if err := emit(Result{Job: e.job, Err: e.refused}); err != nil {
				return err
			}
		}
		return nil
	}
	publish := func(e *entry) error {
		m := e.job.Msg
		e.seq = sess.ch.GetNextPublishSeqNo()
		err := sess.ch.PublishWithContext(ctx, m.Exchange, m.RoutingKey, true, false, m.Publishing)
		if err != nil {
			return err
		}
		e.published = true
		e.sentAt = time.Now()
		msgs++
		return nil
	}
	dropSession := func(reason error) {
		p.connected.Store(false)
		p.log.Warn("broker connection lost; unconfirmed messages will be republished",
			zap.Error(reason), zap.Int("unconfirmed", msgs))
		sess.close()
		sess = nil
		for _, e := range inflight {
			e.published, e.seq = false, 0
		}
		msgs = 0
		clear(returned)
		clear(known)
	}
	// verify refuses a message whose exchange does not exist (checked once
	// per exchange and connection with a passive declare on a scratch
	// channel); an error means the connection itself failed.
	verify := func(e *entry) error {
		ex := e.job.Msg.Exchange
		if ex == "" || known[ex] {
			return nil
		}
		exists, err := exchangeExists(sess.conn, ex)
		if err != nil {
			return err
		}
		if !exists {
			e.refused = fmt.Errorf("%w: %q (404 NOT_FOUND)", ErrNoExchange, ex)
			return nil
		}
		known[ex] = true
		return nil
	}
	// send verifies then publishes one entry.
	send := func(e *entry) error {
		if err := verify(e); err != nil {
			return err
		}
		if e.refused != nil {
			return nil
		}
		return publish(e)
	}

	for {
		if !inOpen && len(inflight) == 0 {
			return nil
		}
		if sess == nil {
			s, err := p.connect()
			if err != nil {
				p.log.Warn("broker connect failed, retrying", zap.String("broker", Redact(p.cfg.URL)),
					zap.Error(err), zap.Duration("backoff", backoff))
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, p.cfg.ReconnectMax)
				continue
			}
			sess, backoff = s, p.cfg.ReconnectMin
			p.connected.Store(true)
			p.log.Info("broker connected", zap.String("broker", Redact(p.cfg.URL)), zap.Int("republishing", len(inflight)))
			// Republish, in order, everything not confirmed on the old
			// channel: its fate there is unknown.
			failed := false
			for _, e := range inflight {
				if e.job.Msg == nil || e.refused != nil {
					continue
				}
				if err := send(e); err != nil {
					dropSession(err)
					failed = true
					break
				}
			}
			if failed {
				continue
			}
		}

		var inCh <-chan Job
		if inOpen && holdTimer == nil && msgs < p.cfg.Window && len(inflight) < 4*p.cfg.Window {
			inCh = in
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-holdTimer:
			holdTimer = nil
			if err := send(inflight[0]); err != nil {
				dropSession(err)
				continue
			}
			if err := settleHead(); err != nil && !errors.Is(err, errHold) {
				return err
			}
		case job, ok := <-inCh:
			if !ok {
				inOpen = false
				continue
			}
			e := &entry{job: job}
			if m := job.Msg; m != nil && len(m.Publishing.Body) > p.cfg.MaxMessageSize {
				// Never sent: it fails at its place in the order.
				e.refused = fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(m.Publishing.Body), p.cfg.MaxMessageSize)
			}
			inflight = append(inflight, e)
			if job.Msg != nil && e.refused == nil {
				if err := send(e); err != nil {
					dropSession(err)
					continue
				}
			}
			if err := settleHead(); err != nil && !errors.Is(err, errHold) {
				return err
			}
		case r := <-sess.returns:
			returned[r.MessageId] = fmt.Sprintf("%d %s (exchange %q, routing key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
		case c, ok := <-sess.confirms:
			if !ok {
				dropSession(errors.New("channel closed"))
				continue
			}
			// basic.return precedes the ack of the same message on the
			// wire, and amqp091 hands returns over before it dispatches the
			// ack, so every return for this tag is already buffered.
			drainReturns(sess.returns, returned)
			if err := p.settle(&inflight, &msgs, c, returned, emit); err != nil && !errors.Is(err, errHold) {
				return err
			}
			if holdTimer != nil {
				continue
			}
			if err := settleHead(); err != nil && !errors.Is(err, errHold) {
				return err
			}
		}
	}
}

func drainReturns(returns chan amqp.Return, returned map[string]string) {
	for {
		select {
		case r := <-returns:
			returned[r.MessageId] = fmt.Sprintf("%d %s (exchange %q, routing key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
		default:
			return
		}
	}
}

// settle applies one confirmation: it settles the head entries up to and
// including the confirmed tag (markers between are passed through).
func (p *Publisher) settle(inflight *[]*entry, msgs *int, c amqp.Confirmation, returned map[string]string, emit func(Result) error) error {
	for len(*inflight) > 0 {
		e := (*inflight)[0]
		if e.settleable() {
			*inflight = (*inflight)[1:]
			if err := emit(Result{Job: e.job, Err: e.refused}); err != nil {
				return err
			}
			continue
		}
		if e.seq > c.DeliveryTag {
			return nil
		}
		// amqp091 delivers confirmations in tag order, one per message.
		var err error
		id := e.job.Msg.Publishing.MessageId
		switch reason, wasReturned := returned[id]; {
		case wasReturned:
			delete(returned, id)
			err = fmt.Errorf("%w: %s", ErrReturned, reason)
		case !c.Ack && e.seq == c.DeliveryTag:
			err = ErrNacked
		}
		*msgs--
		*inflight = (*inflight)[1:]
		if err := emit(Result{Job: e.job, Err: err, Latency: time.Since(e.sentAt)}); err != nil {
			return err
		}
		if e.seq == c.DeliveryTag {
			return nil
		}
	}
	return nil
}

// exchangeExists declares the exchange passively on a scratch channel: a
// 404 closes that channel only.
func exchangeExists(conn *amqp.Connection, name string) (bool, error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("opening a channel to check exchange %q: %w", name, err)
	}
	err = ch.ExchangeDeclarePassive(name, "topic", true, false, false, false, nil)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return false, nil
	}
	_ = ch.Close()
	if err != nil {
		return false, fmt.Errorf("checking exchange %q: %w", name, err)
	}
	return true, nil
}

func (p *Publisher) connect() (*session, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(p.cfg.ConnectionName)
	conn, err := amqp.DialConfig(p.cfg.URL, amqp.Config{
		Heartbeat:       10 * time.Second,
		TLSClientConfig: p.cfg.TLS,
		Properties:      props,
		Dial:            batchDial(10 * time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", Redact(p.cfg.URL), Scrub(err, p.cfg.URL))
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("opening channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("enabling publisher confirms: %w", err)
	}
	s := &session{conn: conn, ch: ch,
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, p.cfg.Window+16)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, p.cfg.Window+16)),
	}
	return s, nil
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

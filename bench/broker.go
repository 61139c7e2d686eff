package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"
)

// dialChannel opens a connection and one channel on it, in confirm mode
// when confirm is set; on an error nothing is left open.
func dialChannel(url string, confirm bool) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err == nil && confirm {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

// topology is the run's exchange and queues on the broker at amqpURL.
type topology struct {
	amqpURL         string
	exchange, queue string
}

// setupBroker declares the run's topology and starts the consumer that
// every step reads deliveries from.
func (e *env) setupBroker() (err error) {
	if e.stack.broker, err = e.topo.declare(); err != nil {
		return err
	}
	if e.o.noConsumer {
		return nil
	}
	e.consumer, err = startConsumer(e.topo.amqpURL, e.topo.queue, true)
	return err
}

// declare declares the topic exchange and a durable queue bound to it with
// "#", and the quorum queue of the quorum drain (quorum.go), unbound. It
// returns what the broker says it is.
func (t topology) declare() (version string, err error) {
	conn, ch, err := dialChannel(t.amqpURL, false)
	if err != nil {
		return "", fmt.Errorf("RabbitMQ is not reachable (scripts/stack.sh up): %w", err)
	}
	defer conn.Close()
	version = brokerVersion(conn)
	if err := ch.ExchangeDeclare(t.exchange, "topic", true, false, false, false, nil); err != nil {
		return version, fmt.Errorf("declaring exchange: %w", err)
	}
	if _, err := ch.QueueDeclare(t.queue, true, false, false, false, nil); err != nil {
		return version, fmt.Errorf("declaring queue: %w", err)
	}
	if err := ch.QueueBind(t.queue, "#", t.exchange, false, nil); err != nil {
		return version, fmt.Errorf("binding queue: %w", err)
	}
	return version, t.declareQuorumQueue(ch)
}

// remove deletes the queues and the exchange.
func (t topology) remove() {
	conn, ch, err := dialChannel(t.amqpURL, false)
	if err != nil {
		progress("removing exchange and queue: %v", err)
		return
	}
	defer conn.Close()
	_, _ = ch.QueueDelete(t.queue, false, false, false)
	_, _ = ch.QueueDelete(t.quorumQueue(), false, false, false)
	_ = ch.ExchangeDelete(t.exchange, false, false)
}

// consumer reads a queue with auto-ack and hands each delivery to the
// current sink. Deliveries whose message id is not the sink's are dropped.
type consumer struct {
	conn *amqp.Connection
	cur  atomic.Pointer[sink]
	done chan struct{}
}

// startConsumer consumes queue, as its only consumer when exclusive.
func startConsumer(url, queue string, exclusive bool) (*consumer, error) {
	conn, ch, err := dialChannel(url, false)
	if err != nil {
		return nil, err
	}
	deliveries, err := ch.Consume(queue, "bench", true, exclusive, false, false, nil)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("consuming %s: %w", queue, err)
	}
	c := &consumer{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for d := range deliveries {
			now := time.Now()
			if s := c.cur.Load(); s != nil {
				s.add(d.MessageId, d.Body, now)
			}
		}
	}()
	return c, nil
}

func (c *consumer) close() {
	_ = c.conn.Close()
	<-c.done
}

// expect starts a sink for message ids with prefix; want is the count that
// completes it (-1: none, the caller polls counts). With latency set it
// records commit-to-delivery times.
func (c *consumer) expect(prefix string, want int, latency bool) *sink {
	s := &sink{prefix: prefix, want: want, seen: make(map[string]struct{}, max(want, 0)), full: make(chan struct{}), latency: latency}
	c.cur.Store(s)
	return s
}

// sink collects one run's deliveries.
type sink struct {
	prefix  string
	want    int
	latency bool

	mu          sync.Mutex
	seen        map[string]struct{}
	lat         []time.Duration // first delivery of each message
	sent        []time.Time     // and its commit time (from the payload)
	dups        int
	first, last time.Time
	// lastLag is the newest first delivery's commit-to-delivery time
	// (from the payload's "t"), kept whether or not latency is: the kill
	// step tells a relay that keeps up from one catching up by it.
	lastLag time.Duration
	full    chan struct{}
}

func (s *sink) add(id string, body []byte, at time.Time) {
	if !strings.HasPrefix(id, s.prefix) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.seen[id]; dup {
		s.dups++
		return
	}
	s.seen[id] = struct{}{}
	if s.first.IsZero() {
		s.first = at
	}
	s.last = at
	if t, ok := bodyTime(body); ok {
		s.lastLag = at.Sub(t)
		if s.latency {
			s.lat = append(s.lat, s.lastLag)
			s.sent = append(s.sent, t)
		}
	}
	if len(s.seen) == s.want {
		close(s.full)
	}
}

// bodyTime reads the "t" field (µs since the epoch) that payload writes
// first in the body.
func bodyTime(b []byte) (time.Time, bool) {
	const head = `{"t":`
	if len(b) < len(head) || string(b[:len(head)]) != head {
		return time.Time{}, false
	}
	end := len(head)
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		end++
	}
	us, err := strconv.ParseInt(string(b[len(head):end]), 10, 64)
	if err != nil || us == 0 {
		return time.Time{}, false
	}
	return time.UnixMicro(us), true
}

// wait blocks until the sink is complete or within passes.
func (s *sink) wait(ctx context.Context, within time.Duration) error {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-s.full:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		n, _ := s.counts()
		return fmt.Errorf("%w: %d of %d messages delivered after %s", errTimeout, n, s.want, within)
	}
}

func (s *sink) counts() (distinct, dups int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen), s.dups
}

// keepingUp tells whether the newest delivery came within the last
// `within` and reached the consumer within `within` of its commit.
func (s *sink) keepingUp(within time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.last.IsZero() && time.Since(s.last) < within && s.lastLag < within
}

func (s *sink) span() (first, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.last
}

// trace writes one CSV line per message: label, commit time in ms from
// the first commit, and commit-to-delivery in ms (for -latency-trace).
func (s *sink) trace(w io.Writer, label string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sent) == 0 {
		return nil
	}
	t0 := slices.MinFunc(s.sent, func(a, b time.Time) int { return a.Compare(b) })
	bw := bufio.NewWriter(w)
	for i, t := range s.sent {
		fmt.Fprintf(bw, "%s,%.3f,%.3f\n", label, ms(t.Sub(t0)), ms(s.lat[i]))
	}
	return bw.Flush()
}

// percentiles of the recorded latencies: p50, p99 and max.
func (s *sink) percentiles() (p50, p99, mx time.Duration, n int) {
	s.mu.Lock()
	lat := slices.Clone(s.lat)
	s.mu.Unlock()
	if len(lat) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration { return lat[min(int(q*float64(len(lat))), len(lat)-1)] }
	return at(0.50), at(0.99), lat[len(lat)-1], len(lat)
}

// brokerLimit publishes brokerMsgs persistent, mandatory messages with
// confirms from one channel, keeping up to window unconfirmed (the relay's
// default broker.window), to the run's exchange, and times them from the
// first publish to the last delivery at the consumer: the ceiling any relay
// can reach on this stack.
func brokerLimit(ctx context.Context, e *env, rep *report) error {
	n := e.o.brokerMsgs
	r, err := brokerRun(ctx, e, n, 1)
	if err != nil {
		return err
	}
	e.brokerRate = r.rate
	rep.add("broker_limit_msgs_per_s", r.rate, "msg/s")
	rep.add("broker_limit_confirmed_msgs_per_s", r.confirmedRate, "msg/s")
	rep.addCPU("broker_limit", "broker limit", n, r.cpu)
	progress("broker limit: %d messages in %s (%.0f msg/s to the last delivery)", n, r.elapsed.Round(time.Millisecond), r.rate)
	return nil
}

// brokerResult is one timed publish of n messages.
type brokerResult struct {
	rate, confirmedRate float64
	elapsed             time.Duration
	cpu                 cpuUse
}

// brokerRun publishes n messages split over channels publishers, each on
// its own connection (as the relay's lanes are) with up to window
// unconfirmed, and times them to the last confirm and the last delivery.
func brokerRun(ctx context.Context, e *env, n, channels int) (brokerResult, error) {
	const window = 1024
	var r brokerResult
	prefix := e.nextPrefix("b")
	s := e.consumer.expect(prefix, n, false)
	body := []byte(payload(time.Time{}, e.o.payload))
	pubs := make([]brokerPub, channels)
	for i := range pubs {
		conn, ch, err := dialChannel(e.o.amqpURL, true)
		if err != nil {
			return r, err
		}
		defer conn.Close()
		pubs[i] = brokerPub{ch: ch, confirms: ch.NotifyPublish(make(chan amqp.Confirmation, window+16)),
			returns: ch.NotifyReturn(make(chan amqp.Return, 16)), outstanding: make(chan struct{}, window)}
	}
	var (
		t brokerTally
		g errgroup.Group
	)
	cpu0 := sampleCPU(e.procs)
	start := time.Now()
	for c, p := range pubs {
		g.Go(func() error {
			mine := n / channels
			if c < n%channels {
				mine++
			}
			return p.publishShare(ctx, e.topo.exchange, &t, prefix+strconv.Itoa(c)+"-", mine, body)
		})
	}
	if err := g.Wait(); err != nil {
		return r, err
	}
	if err := s.wait(ctx, 120*time.Second); err != nil {
		return r, err
	}
	if t.nacks.Load() > 0 {
		return r, fmt.Errorf("%d nacked", t.nacks.Load())
	}
	_, last := s.span()
	r.cpu = cpuBetween(cpu0, sampleCPU(e.procs))
	r.elapsed = last.Sub(start)
	r.rate = float64(n) / r.elapsed.Seconds()
	r.confirmedRate = float64(n) / time.Unix(0, t.lastConfirmNs.Load()).Sub(start).Seconds()
	return r, nil
}

// brokerPub is one of brokerRun's publishers: a confirming channel on its
// own connection, and a slot in outstanding for each unconfirmed message.
type brokerPub struct {
	ch          *amqp.Channel
	confirms    chan amqp.Confirmation
	returns     chan amqp.Return
	outstanding chan struct{}
}

// brokerTally is what brokerRun's publishers count together.
type brokerTally struct {
	nacks         atomic.Int64
	lastConfirmNs atomic.Int64
}

// publishShare publishes one publisher's n messages to exchange, with
// message ids idPrefix followed by a sequence number, and waits for their
// confirms.
func (p brokerPub) publishShare(ctx context.Context, exchange string, t *brokerTally, idPrefix string, n int, body []byte) error {
	confirmed := make(chan struct{})
	go func() {
		defer close(confirmed)
		p.awaitConfirms(t, n)
	}()
	for i := 0; i < n; i++ {
		select {
		case p.outstanding <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := p.ch.PublishWithContext(ctx, exchange, "bench.created", true, false, amqp.Publishing{
			MessageId: idPrefix + strconv.Itoa(i), ContentType: "application/json", DeliveryMode: amqp.Persistent,
			Timestamp: time.Now(), AppId: "bench", Body: body,
		})
		if err != nil {
			return fmt.Errorf("publishing: %w", err)
		}
	}
	<-confirmed
	if len(p.returns) > 0 {
		return fmt.Errorf("%d returned", len(p.returns))
	}
	return nil
}

// awaitConfirms takes n confirms, freeing a slot of outstanding for each
// and counting the nacks, then moves the time of the last confirm of the
// run forward to now. It returns early when the channel closes.
func (p brokerPub) awaitConfirms(t *brokerTally, n int) {
	for i := 0; i < n; i++ {
		cf, ok := <-p.confirms
		if !ok {
			return
		}
		if !cf.Ack {
			t.nacks.Add(1)
		}
		<-p.outstanding
	}
	for now := time.Now().UnixNano(); ; {
		if old := t.lastConfirmNs.Load(); old >= now || t.lastConfirmNs.CompareAndSwap(old, now) {
			break
		}
	}
}

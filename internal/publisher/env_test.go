package publisher

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// env is a broker the scenario suite runs against: the scripted fake, or
// the stack's RabbitMQ. Scenarios that need a fault only the fake can
// produce ask for fake() and are skipped, with the reason, on the real one.
type env interface {
	// dial is a dialFunc that counts the connections it opens.
	dial(ctx context.Context, url string) (amqpConn, error)
	dials() int
	// bound declares an exchange with a queue bound to it ("#").
	bound(t *testing.T) string
	// unbound declares an exchange no queue is bound to.
	unbound(t *testing.T) string
	// declare creates the named exchange, bound, later in a test.
	declare(t *testing.T, name string)
	// denied declares an exchange the publisher's user may not write to
	// (call it before start: on the real broker the publisher then logs in
	// as a user with write permission on the test's other exchanges only).
	denied(t *testing.T) string
	// received waits for n distinct messages routed via exchange and
	// returns what arrived (with any duplicates).
	received(t *testing.T, exchange string, n int) []amqp.Publishing
	fake() *fakeBroker
}

func eventually(t *testing.T, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: "+format, append([]any{within}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var nameSeq atomic.Int64

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), nameSeq.Add(1))
}

// fakeEnv --------------------------------------------------------------

type fakeEnv struct{ b *fakeBroker }

func (f fakeEnv) dial(ctx context.Context, url string) (amqpConn, error) { return f.b.dial(ctx, url) }
func (f fakeEnv) dials() int                                             { return f.b.dialCount() }
func (f fakeEnv) fake() *fakeBroker                                      { return f.b }
func (f fakeEnv) bound(*testing.T) string {
	n := uniqueName("ex")
	f.b.addExchange(n, true)
	return n
}
func (f fakeEnv) unbound(*testing.T) string {
	n := uniqueName("ex_unbound")
	f.b.addExchange(n, false)
	return n
}
func (f fakeEnv) declare(_ *testing.T, name string) { f.b.addExchange(name, true) }
func (f fakeEnv) denied(*testing.T) string {
	n := uniqueName("denied")
	f.b.addExchange(n, true)
	return n
}
func (f fakeEnv) received(t *testing.T, exchange string, n int) []amqp.Publishing {
	t.Helper()
	var got []amqp.Publishing
	eventually(t, 5*time.Second, func() bool {
		f.b.mu.Lock()
		defer f.b.mu.Unlock()
		got = got[:0]
		for _, p := range f.b.routed {
			if p.exchange == exchange {
				got = append(got, p.msg)
			}
		}
		return len(firstArrivals(got)) >= n
	}, "%d messages routed via %s, want %d", len(got), exchange, n)
	return got
}

// realEnv --------------------------------------------------------------

// amqpURL is the broker of the stack's flavour: RabbitMQ 3.10 or 4.3
// (testenv.Current).
var amqpURL = testenv.AMQPURL

type realEnv struct {
	p      *Publisher // dials with the production dialFunc
	n      atomic.Int64
	admin  *amqp.Channel
	mu     sync.Mutex
	queues map[string]string // exchange -> its queue
}

func newRealEnv(t *testing.T) *realEnv {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatalf("connecting to the stack's RabbitMQ at %s: %v", Redact(amqpURL), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("opening channel: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p, err := New(Config{URL: amqpURL}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return &realEnv{p: p, admin: ch, queues: map[string]string{}}
}

// denied creates a user whose write permission covers the test's
// pubtest_ex exchanges only (through the management API, removed when the
// test ends) and makes the publisher log in as that user.
func (r *realEnv) denied(t *testing.T) string {
	t.Helper()
	name := uniqueName("pubtest_denied")
	if err := r.admin.ExchangeDeclare(name, "topic", false, true, false, false, nil); err != nil {
		t.Fatalf("declaring %s: %v", name, err)
	}
	t.Cleanup(func() { _ = r.admin.ExchangeDelete(name, false, false) })
	user := uniqueName("pubtest_user")
	manage(t, http.MethodPut, "/api/users/"+user, `{"password":"pubtest","tags":""}`)
	t.Cleanup(func() { manage(t, http.MethodDelete, "/api/users/"+user, "") })
	manage(t, http.MethodPut, "/api/permissions/%2F/"+user, `{"configure":"^$","write":"^pubtest_ex","read":".*"}`)
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, "pubtest")
	if r.p, err = New(Config{URL: u.String()}, r.p.log); err != nil {
		t.Fatal(err)
	}
	return name
}

// manage calls the RabbitMQ management API as the stack's admin user.
func manage(t *testing.T, method, path, body string) {
	t.Helper()
	req, err := http.NewRequest(method, testenv.ManagementURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("management API %s %s: %v", method, path, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("management API %s %s: %s", method, path, resp.Status)
	}
}

// dial ignores the URL: the publisher under test may log in as another
// user (denied), with the URL r.p was made with.
func (r *realEnv) dial(ctx context.Context, _ string) (amqpConn, error) {
	r.n.Add(1)
	return r.p.dialAMQP(ctx, r.p.cfg.URL)
}
func (r *realEnv) dials() int        { return int(r.n.Load()) }
func (r *realEnv) fake() *fakeBroker { return nil }

func (r *realEnv) bound(t *testing.T) string {
	name := uniqueName("pubtest_ex")
	r.declare(t, name)
	return name
}

func (r *realEnv) unbound(t *testing.T) string {
	name := uniqueName("pubtest_unbound")
	if err := r.admin.ExchangeDeclare(name, "topic", false, true, false, false, nil); err != nil {
		t.Fatalf("declaring %s: %v", name, err)
	}
	t.Cleanup(func() { _ = r.admin.ExchangeDelete(name, false, false) })
	return name
}

func (r *realEnv) declare(t *testing.T, name string) {
	t.Helper()
	q := name + "_q"
	if err := r.admin.ExchangeDeclare(name, "topic", false, false, false, false, nil); err != nil {
		t.Fatalf("declaring %s: %v", name, err)
	}
	if _, err := r.admin.QueueDeclare(q, false, false, false, false, nil); err != nil {
		t.Fatalf("declaring %s: %v", q, err)
	}
	if err := r.admin.QueueBind(q, "#", name, false, nil); err != nil {
		t.Fatalf("binding %s: %v", q, err)
	}
	r.mu.Lock()
	r.queues[name] = q
	r.mu.Unlock()
	t.Cleanup(func() {
		_, _ = r.admin.QueueDelete(q, false, false, false)
		_ = r.admin.ExchangeDelete(name, false, false)
	})
}

func (r *realEnv) received(t *testing.T, exchange string, n int) []amqp.Publishing {
	t.Helper()
	r.mu.Lock()
	q := r.queues[exchange]
	r.mu.Unlock()
	var got []amqp.Publishing
	eventually(t, 10*time.Second, func() bool {
		for len(firstArrivals(got)) < n {
			d, ok, err := r.admin.Get(q, true)
			if err != nil {
				t.Fatalf("reading %s: %v", q, err)
			}
			if !ok {
				return false
			}
			got = append(got, amqp.Publishing{MessageId: d.MessageId, Body: d.Body, Headers: d.Headers})
		}
		return true
	}, "%d messages in %s, want %d", len(got), q, n)
	return got
}

// harness --------------------------------------------------------------

// harness runs one Publisher against an env.
type harness struct {
	t      *testing.T
	e      env
	p      *Publisher
	in     chan Job[string]
	out    chan Result[string]
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, e env, cfg Config) *harness {
	t.Helper()
	return startLogged(t, e, cfg, zaptest.NewLogger(t))
}

// startLogged is start with the publisher logging to log. cfg.URL is the
// stack's broker unless cfg.URLs names nodes (the fake's).
func startLogged(t *testing.T, e env, cfg Config, log *zap.Logger) *harness {
	t.Helper()
	if len(cfg.URLs) == 0 {
		cfg.URL = amqpURL
	}
	if cfg.ReconnectMin == 0 {
		cfg.ReconnectMin = 10 * time.Millisecond
	}
	p, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	p.dial = e.dial
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, e: e, p: p, in: make(chan Job[string], 4096), out: make(chan Result[string], 4096), cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- Stream[string]{p}.Run(ctx, h.in, h.out) }()
	t.Cleanup(h.stop)
	return h
}

// stop cancels Run and requires it to return promptly.
func (h *harness) stop() {
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(3 * time.Second):
		h.t.Errorf("Run did not return within 3s of ctx cancel")
	}
}

func (h *harness) send(jobs ...Job[string]) {
	for _, j := range jobs {
		select {
		case h.in <- j:
		case <-time.After(10 * time.Second):
			h.t.Fatalf("publisher took no job for 10s")
		}
	}
}

// roundTrip sends jobs and waits for their results, which must come back
// in the order the jobs were sent.
func (h *harness) roundTrip(jobs ...Job[string]) []Result[string] {
	h.t.Helper()
	h.send(jobs...)
	rs := h.results(len(jobs))
	want := make([]string, len(jobs))
	for i, j := range jobs {
		want[i] = j.Tag
	}
	wantOrder(h.t, rs, want)
	return rs
}

// waitHold waits until the stream holds behind a message tried at least
// attempts times, and returns the hold.
func (h *harness) waitHold(attempts int) Hold {
	h.t.Helper()
	var hold Hold
	eventually(h.t, 5*time.Second, func() bool {
		var ok bool
		hold, ok = h.p.Holding()
		return ok && hold.Attempts >= attempts
	}, "the stream never held behind a message tried %d times", attempts)
	return hold
}

// results waits for n results, in order.
func (h *harness) results(n int) []Result[string] {
	h.t.Helper()
	var rs []Result[string]
	deadline := time.After(20 * time.Second)
	for len(rs) < n {
		select {
		case r := <-h.out:
			rs = append(rs, r)
		case err := <-h.done:
			h.done <- err // for stop and for the test
			select {
			case r := <-h.out: // results sent before Run returned
				rs = append(rs, r)
				continue
			default:
			}
			h.t.Fatalf("Run returned %v after %d of %d results", err, len(rs), n)
		case <-deadline:
			h.t.Fatalf("%d of %d results after 20s", len(rs), n)
		}
	}
	return rs
}

func msg(id, exchange, key string) Job[string] {
	return Job[string]{Msg: &router.Message{Exchange: exchange, RoutingKey: key,
		Publishing: amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Body: []byte("body of " + id)}}, Tag: id}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i+1)
	}
	return out
}

// wantOrder requires results to be for want, in order.
func wantOrder(t *testing.T, rs []Result[string], want []string) {
	t.Helper()
	got := make([]string, len(rs))
	for i, r := range rs {
		got[i] = r.Job.Tag
	}
	if !slices.Equal(got, want) {
		t.Fatalf("results out of order:\n got %v\nwant %v", got, want)
	}
}

func pubIDs(ps []amqp.Publishing) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.MessageId
	}
	return out
}

// firstArrivals returns the message ids in the order they first arrived,
// each once.
func firstArrivals(ps []amqp.Publishing) []string {
	seen := map[string]bool{}
	return slices.DeleteFunc(pubIDs(ps), func(id string) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	})
}

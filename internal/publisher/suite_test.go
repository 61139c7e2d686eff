package publisher

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The scenario suite is written once and run against the scripted fake
// broker (TestPublisherFakeBroker) and the stack's RabbitMQ
// (TestPublisherRabbitMQ). A scenario whose fault only the fake can script
// skips itself, saying so, on the real broker.
var scenarios = []struct {
	name string
	run  func(t *testing.T, e env)
}{
	{"InOrder", testInOrder},
	{"MultipleAckThenReset", testMultipleAckThenReset},
	{"StrictHoldPlusReconnect", testStrictHoldPlusReconnect},
	{"StrictHoldNothingOvertakes", testStrictHoldNothingOvertakes},
	{"StrictHoldsAnInvalidMessage", testStrictHoldsInvalid},
	{"RefusedExchangeIsBounded", testRefusedExchangeIsBounded},
	{"WritePermissionRefused", testWritePermissionRefused},
	{"RefusalAmongManyInFlight", testRefusalAmongManyInFlight},
	{"ForeseeableRefusalsCostNoDuplicates", testForeseeableRefusalsCostNoDuplicates},
	{"FrameErrorClosesConnection", testFrameErrorClosesConnection},
	{"ExchangeDeletedAfterCheck", testExchangeDeletedAfterCheck},
	{"Nack", testNack},
	{"ReturnsForSameMessageID", testReturnsForSameMessageID},
	{"SlowConfirms", testSlowConfirms},
	{"HeaderTypeRefused406", testHeaderTypeRefused},
	{"FieldsOver255Bytes", testFieldsOver255},
	{"HeadersOverFrameMax", testHeadersOverFrameMax},
	{"BodyOverMaxMessageSize", testBodyOverMax},
	{"MustDeliverWithDeadLetterExchange", testMustDeliverDLX},
	{"MustDeliverWithoutDeadLetterExchange", testMustDeliverHold},
	{"MustDeliverDeadLetterExchangeMissing", testMustDeliverDLXMissing},
	{"MissingExchangeIsCached", testMissingExchangeCached},
	{"BrokerDownAtStart", testBrokerDownAtStart},
	{"RunReturnsWhenInputCloses", testRunReturnsWhenInputCloses},
	{"ReconnectBackoff", testReconnectBackoff},
}

func TestPublisherFakeBroker(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, fakeEnv{newFakeBroker()}) })
	}
}

func TestPublisherRabbitMQ(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the stack's RabbitMQ; skipped with -short")
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, newRealEnv(t)) })
	}
}

func needFake(t *testing.T, e env, why string) *fakeBroker {
	t.Helper()
	f := e.fake()
	if f == nil {
		t.Skip("the real broker cannot be made to " + why + " on demand; the fake covers it")
	}
	return f
}

func jobsTo(exchange string, names []string) []Job[string] {
	out := make([]Job[string], len(names))
	for i, id := range names {
		out[i] = msg(id, exchange, "k."+id)
	}
	return out
}

func wantErrs(t *testing.T, rs []Result[string], want map[string]error) {
	t.Helper()
	for _, r := range rs {
		id := r.Job.Tag
		w := want[id]
		switch {
		case w == nil && r.Err != nil:
			t.Errorf("%s: unexpected error %v", id, r.Err)
		case w != nil && !errors.Is(r.Err, w):
			t.Errorf("%s: error %v, want %v", id, r.Err, w)
		}
	}
}

func wantDials(t *testing.T, e env, max int) {
	t.Helper()
	if n := e.dials(); n < 1 || n > max {
		t.Errorf("%d connections opened, want 1..%d", n, max)
	}
}

// wantErrSays requires err to say each of texts.
func wantErrSays(t *testing.T, err error, texts ...string) {
	t.Helper()
	for _, text := range texts {
		if err == nil || !strings.Contains(err.Error(), text) {
			t.Errorf("error %v, want it to say %q", err, text)
		}
	}
}

// scripted is the shape of the scenarios only the fake can play: n
// messages m-0001.. to a bound exchange, each publish answered by script.
type scripted struct {
	why    string // what the real broker cannot be made to do
	cfg    Config
	n      int
	script func(fakePub) outcome
}

// run publishes the messages and returns their results, checked to be in
// order.
func (s scripted) run(t *testing.T, e env) (*fakeBroker, *harness, []Result[string]) {
	t.Helper()
	f := needFake(t, e, s.why)
	ex := e.bound(t)
	f.script = s.script
	h := start(t, e, s.cfg)
	return f, h, h.roundTrip(jobsTo(ex, ids("m", s.n))...)
}

// scriptOne gives the publishes of message id the outcome o and every
// other publish the broker's own.
func scriptOne(id string, o outcome) func(fakePub) outcome {
	return func(p fakePub) outcome {
		if p.msg.MessageId == id {
			return o
		}
		return outcome{code: -1}
	}
}

func testInOrder(t *testing.T, e env) {
	ex := e.bound(t)
	h := start(t, e, Config{Window: 16})
	names := ids("m", 200)
	rs := h.roundTrip(jobsTo(ex, names)...)
	wantErrs(t, rs, nil)
	if got := pubIDs(e.received(t, ex, len(names))); strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("broker received %v, want %v", got, names)
	}
	wantDials(t, e, 1)
}

// A multiple ack covers part of the window, then the connection resets
// with those confirmations still buffered: they settle their messages, the
// closed notification channels are not spun on, the publisher reconnects
// and republishes only what was not confirmed.
func testMultipleAckThenReset(t *testing.T, e env) {
	f, h, rs := scripted{why: "reset a connection with confirmations buffered", cfg: Config{Window: 8}, n: 8,
		script: func(p fakePub) outcome {
			// The first publish to the exchange goes alone and proves it;
			// it must be confirmed for the rest to be pipelined.
			if p.conn > 1 || p.msg.MessageId == "m-0001" {
				return outcome{code: -1}
			}
			if p.msg.MessageId == "m-0005" {
				return outcome{kind: closeConn, ackUpTo: 3} // code 0: a network reset
			}
			return outcome{kind: withhold}
		}}.run(t, e)
	wantErrs(t, rs, nil)
	wantDials(t, e, 2)
	if e.dials() != 2 {
		t.Errorf("%d connections, want 2 (one reconnect)", e.dials())
	}
	// m1..m3 were confirmed before the reset: never sent again. m4..m8
	// were unconfirmed, their fate unknown: each republish is counted.
	again := 0
	for _, p := range f.published {
		if p.conn == 2 && p.msg.MessageId <= "m-0003" {
			t.Errorf("%s republished although it was confirmed", p.msg.MessageId)
		}
		if p.conn == 2 {
			again++
		}
	}
	if n := h.p.Republished(); n != uint64(again) || n != 5 {
		t.Errorf("Republished() = %d, want the %d messages published again (m4..m8)", n, again)
	}
}

// Strict ordering holds a returned message; the connection resets on its
// retry; it is retried again on the new connection and delivered once, and
// the stream continues in order.
func testStrictHoldPlusReconnect(t *testing.T, e env) {
	f := needFake(t, e, "reset the connection on a chosen publish")
	ex := e.bound(t)
	var held Hold
	var h *harness
	f.script = func(p fakePub) outcome {
		if p.msg.MessageId != "m-0002" {
			return outcome{code: -1}
		}
		switch p.attempt {
		case 1:
			return outcome{kind: ret}
		case 2:
			held, _ = h.p.Holding()
			return outcome{kind: closeConn}
		}
		return outcome{code: -1}
	}
	h = start(t, e, Config{Strict: true, HoldBackoff: HoldBackoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}})
	names := ids("m", 6)
	rs := h.roundTrip(jobsTo(ex, names)...)
	wantErrs(t, rs, nil)
	if held.MessageID != "m-0002" || !strings.Contains(held.Reason, "unroutable") || held.Attempts != 1 {
		t.Errorf("during the hold Holding() = %+v, want m-0002, unroutable, 1 attempt", held)
	}
	if hh, ok := h.p.Holding(); ok {
		t.Errorf("Holding() = %+v after delivery, want nothing", hh)
	}
	if got := f.routedIDs(); strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("routed %v, want each of %v once in order", got, names)
	}
	if e.dials() != 2 {
		t.Errorf("%d connections, want 2", e.dials())
	}
}

// Strict ordering: a message returned on its first three attempts holds
// every message behind it, on every retry.
func testStrictHoldNothingOvertakes(t *testing.T, e env) {
	f, _, rs := scripted{why: "return a message a chosen number of times", n: 6,
		cfg: Config{Strict: true, HoldBackoff: HoldBackoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}},
		script: func(p fakePub) outcome {
			if p.msg.MessageId == "m-0002" && p.attempt <= 3 {
				return outcome{kind: ret}
			}
			return outcome{code: -1}
		}}.run(t, e)
	wantErrs(t, rs, nil)
	f.mu.Lock()
	var order []string
	for _, p := range f.published {
		order = append(order, p.msg.MessageId)
	}
	f.mu.Unlock()
	want := "m-0001,m-0002,m-0002,m-0002,m-0002,m-0003,m-0004,m-0005,m-0006"
	if strings.Join(order, ",") != want {
		t.Errorf("published %v, want %s", order, want)
	}
	wantDials(t, e, 1)
}

// Strict ordering and a message that fails before it is sent (a 300-byte
// routing key): the stream holds on it, retrying with backoff, and nothing
// behind it is published.
func testStrictHoldsInvalid(t *testing.T, e env) {
	f := needFake(t, e, "list what was published")
	ex := e.bound(t)
	h := start(t, e, Config{Strict: true, HoldBackoff: HoldBackoff{Base: 5 * time.Millisecond, Max: 10 * time.Millisecond}})
	h.send(msg("m1", ex, "k"), msg("bad", ex, strings.Repeat("k", 300)), msg("m2", ex, "k"), msg("m3", ex, "k"))
	if rs := h.results(1); rs[0].Err != nil {
		t.Fatalf("m1: %v", rs[0].Err)
	}
	hold := h.waitHold(3)
	if !strings.Contains(hold.Reason, "routing key is 300 bytes") {
		t.Errorf("hold reason %q, want the routing key's length", hold.Reason)
	}
	if got := f.routedIDs(); strings.Join(got, ",") != "m1" {
		t.Errorf("published %v while the stream holds behind bad, want only m1", got)
	}
	wantDials(t, e, 1)
}

// A message to an exchange the broker refuses (403 on the internal trace
// exchange) fails with the broker's reason; the rows around it flow, on the
// same connection.
func testRefusedExchangeIsBounded(t *testing.T, e env) {
	ex := e.bound(t)
	h := start(t, e, Config{Window: 64})
	before, after := ids("a", 50), ids("b", 50)
	rs := h.roundTrip(slices.Concat(jobsTo(ex, before), []Job[string]{msg("trace", "amq.rabbitmq.trace", "k")}, jobsTo(ex, after))...)
	wantErrs(t, rs, map[string]error{"trace": ErrRefused})
	wantErrSays(t, rs[50].Err, "403", "ACCESS_REFUSED")
	good := append(append([]string{}, before...), after...)
	wantDeliveredOnce(t, e.received(t, ex, len(good)), good)
	wantDials(t, e, 1)
}

// A message to an exchange the publisher's user may not write to fails
// with the broker's 403; the others flow on the same connection.
func testWritePermissionRefused(t *testing.T, e env) {
	denied := e.denied(t)
	ex := e.bound(t)
	h := start(t, e, Config{Window: 64})
	before, after := ids("a", 20), ids("b", 20)
	rs := h.roundTrip(slices.Concat(jobsTo(ex, before), []Job[string]{msg("denied", denied, "k")}, jobsTo(ex, after))...)
	wantErrs(t, rs, map[string]error{"denied": ErrRefused})
	wantErrSays(t, rs[20].Err, "403 ACCESS_REFUSED")
	wantDeliveredOnce(t, e.received(t, ex, 40), append(append([]string{}, before...), after...))
	wantDials(t, e, 1)
}

// wantDeliveredOnce: each message arrived, in order; a message republished
// after a refusal closed the channel may arrive twice (at-least-once), but
// its first arrival keeps the order.
func wantDeliveredOnce(t *testing.T, got []amqp.Publishing, want []string) {
	t.Helper()
	if first := firstArrivals(got); strings.Join(first, ",") != strings.Join(want, ",") {
		t.Errorf("delivered %v, want %v", first, want)
	}
}

// A refusal nothing foresaw (write permission on a proven exchange revoked
// while messages to it are in flight) closes the channel with several
// messages unconfirmed: the suspects are sent one at a time, the culprit
// is refused a second time, alone, and fails; nobody else fails, nothing
// is sent a third time, and every message published again is counted.
func testRefusalAmongManyInFlight(t *testing.T, e env) {
	f := needFake(t, e, "withhold confirmations and revoke a permission")
	ex := e.bound(t)
	refused := false // until the refusal, nothing after the probe is confirmed
	f.script = func(p fakePub) outcome {
		switch {
		case p.msg.MessageId == "probe":
			return outcome{code: -1}
		case p.msg.MessageId == "bad":
			refused = true
			return outcome{kind: closeChannel, code: 403, text: "ACCESS_REFUSED - write access to exchange '" + ex + "' refused"}
		case !refused:
			return outcome{kind: withhold}
		}
		return outcome{code: -1}
	}
	h := start(t, e, Config{Window: 32})
	names := ids("a", 5)
	rs := h.roundTrip(slices.Concat([]Job[string]{msg("probe", ex, "k")}, jobsTo(ex, names[:3]),
		[]Job[string]{msg("bad", ex, "k")}, jobsTo(ex, names[3:]))...)
	wantErrs(t, rs, map[string]error{"bad": ErrRefused})
	tries := map[string]int{}
	for _, p := range f.published {
		tries[p.msg.MessageId]++
	}
	if tries["bad"] != 2 {
		t.Errorf("the refused message was published %d times, want 2 (with others, then alone)", tries["bad"])
	}
	for _, id := range names[:3] {
		if tries[id] != 2 {
			t.Errorf("%s, unconfirmed at the refusal, was published %d times, want 2", id, tries[id])
		}
	}
	// Unconfirmed when the channel closed, each published once more: a1..a3
	// and bad, and a4 and a5 if the client had sent them behind bad before
	// it saw the close (the broker discarded them; the client cannot know).
	if n := h.p.Republished(); n < 4 || n > 6 {
		t.Errorf("Republished() = %d, want 4..6 (the messages whose fate was unknown)", n)
	}
	wantDials(t, e, 1)
}

// Refusals the publisher can foresee cost no duplicate, with many messages
// in flight around them: a 403 for an internal exchange or one the user
// may not write to (the first publish to an exchange goes alone, so its
// refusal names it), and the 406 a CC header that is not an array or an
// invalid expiration would get (checked before sending). Every good
// message arrives exactly once and nothing is republished.
func testForeseeableRefusalsCostNoDuplicates(t *testing.T, e env) {
	denied := e.denied(t)
	ex := e.bound(t)
	h := start(t, e, Config{Window: 256})
	cc, exp := msg("cc", ex, "k"), msg("exp", ex, "k")
	cc.Msg.Publishing.Headers = amqp.Table{"CC": "not-a-list"}
	exp.Msg.Publishing.Expiration = "-1"
	var jobs []Job[string]
	var good []string
	for i, bad := range []Job[string]{msg("trace", "amq.rabbitmq.trace", "k"), msg("denied", denied, "k"), cc, exp} {
		batch := ids(fmt.Sprintf("g%d", i), 300)
		jobs = append(append(jobs, jobsTo(ex, batch)...), bad)
		good = append(good, batch...)
	}
	// A fence: every copy of an earlier message that was ever published
	// is in the queue before it.
	jobs, good = append(jobs, msg("fence", ex, "k")), append(good, "fence")
	rs := h.roundTrip(jobs...)
	wantErrs(t, rs, map[string]error{"trace": ErrRefused, "denied": ErrRefused, "cc": ErrRefused, "exp": ErrRefused})
	got := e.received(t, ex, len(good))
	if len(got) != len(good) {
		t.Errorf("%d messages arrived for %d good ones: %d duplicates", len(got), len(good), len(got)-len(good))
	}
	wantDeliveredOnce(t, got, good)
	if n := h.p.Republished(); n != 0 {
		t.Errorf("Republished() = %d, want 0", n)
	}
	wantDials(t, e, 1)
}

// A frame error (the broker closes the whole connection over what one
// message looked like) settles that message, reconnects, and the rest
// flows.
func testFrameErrorClosesConnection(t *testing.T, e env) {
	_, _, rs := scripted{why: "close the connection with a frame error on a chosen message", cfg: Config{Window: 1}, n: 5,
		script: scriptOne("m-0003", outcome{kind: closeConn, code: amqp.FrameError, text: "FRAME_ERROR - frame too large"})}.run(t, e)
	wantErrs(t, rs, map[string]error{"m-0003": ErrRefused})
	wantErrSays(t, rs[2].Err, "501 FRAME_ERROR")
	if e.dials() != 2 {
		t.Errorf("%d connections, want 2", e.dials())
	}
}

// An exchange deleted after the (cached) passive check: the broker's 404
// on publish fails that message with ErrNoExchange and the rest flows.
func testExchangeDeletedAfterCheck(t *testing.T, e env) {
	f := needFake(t, e, "delete an exchange between two publishes")
	ex, doomed := e.bound(t), e.bound(t)
	h := start(t, e, Config{Window: 1})
	h.send(msg("m1", doomed, "k"))
	if rs := h.results(1); rs[0].Err != nil {
		t.Fatalf("m1: %v", rs[0].Err)
	}
	f.mu.Lock()
	delete(f.exchanges, doomed)
	f.mu.Unlock()
	rs := h.roundTrip(msg("m2", doomed, "k"), msg("m3", ex, "k"), msg("m4", doomed, "k"))
	wantErrs(t, rs, map[string]error{"m2": ErrNoExchange, "m4": ErrNoExchange})
	wantErrSays(t, rs[0].Err, "404 NOT_FOUND")
	wantDials(t, e, 1)
}

func testNack(t *testing.T, e env) {
	_, _, rs := scripted{why: "nack a message", n: 4, script: scriptOne("m-0002", outcome{kind: nack})}.run(t, e)
	wantErrs(t, rs, map[string]error{"m-0002": ErrNacked})
	wantDials(t, e, 1)
}

// Two messages in flight share a message id; one is unroutable. The return
// fails that one only.
func testReturnsForSameMessageID(t *testing.T, e env) {
	ex, lost := e.bound(t), e.unbound(t)
	h := start(t, e, Config{Window: 8})
	job := func(tag, exchange string) Job[string] {
		j := msg("same-id", exchange, "k")
		j.Tag = tag
		return j
	}
	rs := h.roundTrip(job("x1", lost), job("x2", ex), job("x3", ex), job("x4", lost), job("x5", ex))
	wantErrs(t, rs, map[string]error{"x1": ErrReturned, "x4": ErrReturned})
	wantErrSays(t, rs[0].Err, "312 NO_ROUTE")
	wantDials(t, e, 1)
}

func testSlowConfirms(t *testing.T, e env) {
	f, _, rs := scripted{why: "slow its confirmations down", cfg: Config{Window: 4}, n: 60,
		script: func(fakePub) outcome { return outcome{kind: ack, delay: 3 * time.Millisecond} }}.run(t, e)
	wantErrs(t, rs, nil)
	if f.maxUnconf > 4 {
		t.Errorf("%d messages unconfirmed at once, window is 4", f.maxUnconf)
	}
	wantDials(t, e, 1)
}

// RabbitMQ refuses a CC header that is not an array of strings with a 406
// channel error.
func testHeaderTypeRefused(t *testing.T, e env) {
	ex := e.bound(t)
	h := start(t, e, Config{})
	bad := msg("bad", ex, "k")
	bad.Msg.Publishing.Headers = amqp.Table{"CC": int32(5)}
	rs := h.roundTrip(msg("m1", ex, "k"), bad, msg("m2", ex, "k"))
	wantErrs(t, rs, map[string]error{"bad": ErrRefused})
	wantErrSays(t, rs[1].Err, "406")
	wantDeliveredOnce(t, e.received(t, ex, 2), []string{"m1", "m2"})
	wantDials(t, e, 1)
}

func testFieldsOver255(t *testing.T, e env) {
	ex := e.bound(t)
	h := start(t, e, Config{})
	long := strings.Repeat("é", 150) // 300 bytes
	key := msg("key", ex, long)
	exch := msg("exchange", long, "k")
	id := msg("id", ex, "k")
	id.Msg.Publishing.MessageId = long
	hdr := msg("header", ex, "k")
	hdr.Msg.Publishing.Headers = amqp.Table{long: "v"}
	rs := h.roundTrip(msg("m1", ex, "k"), key, exch, id, hdr, msg("m2", ex, "k"))
	tooLong := map[string]error{"key": ErrFieldTooLong, "exchange": ErrFieldTooLong, "id": ErrFieldTooLong, "header": ErrFieldTooLong}
	wantErrs(t, rs, tooLong)
	for i, field := range []string{"routing key is 300 bytes", "exchange is 300 bytes", "message id is 300 bytes", "header name in headers is 300 bytes"} {
		wantErrSays(t, rs[i+1].Err, field)
	}
	wantDeliveredOnce(t, e.received(t, ex, 2), []string{"m1", "m2"})
	wantDials(t, e, 1)
}

// A content header exactly at frame_max goes out; one byte more fails
// before it reaches the broker (which would close the connection).
func testHeadersOverFrameMax(t *testing.T, e env) {
	ex := e.bound(t)
	h := start(t, e, Config{})
	const frameMax = 131072 // RabbitMQ's default, and the fake's
	fits := msg("fits", ex, "k")
	// frame overhead 8, fixed header 14, message id 1+4, delivery mode
	// 1, table length 4, field name 1+1, string 5.
	fits.Msg.Publishing.Headers = amqp.Table{"h": strings.Repeat("x", frameMax-8-14-5-1-4-2-5)}
	over := msg("over", ex, "k")
	over.Msg.Publishing.Headers = amqp.Table{"h": strings.Repeat("x", frameMax-8-14-5-1-4-2-5+1)}
	rs := h.roundTrip(msg("m1", ex, "k"), fits, over, msg("m2", ex, "k"))
	wantErrs(t, rs, map[string]error{"over": ErrFieldTooLong})
	wantErrSays(t, rs[2].Err, "131073 bytes", "frame_max is 131072")
	wantDeliveredOnce(t, e.received(t, ex, 3), []string{"m1", "fits", "m2"})
	wantDials(t, e, 1)
}

func testBodyOverMax(t *testing.T, e env) {
	ex := e.bound(t)
	h := start(t, e, Config{MaxMessageSize: 1000})
	fits, over := msg("fits", ex, "k"), msg("over", ex, "k")
	fits.Msg.Publishing.Body = make([]byte, 1000)
	over.Msg.Publishing.Body = make([]byte, 1001)
	rs := h.roundTrip(fits, over, msg("m2", ex, "k"))
	wantErrs(t, rs, map[string]error{"over": ErrTooLarge})
	wantErrSays(t, rs[1].Err, "1001 bytes, the limit is 1000")
	wantDeliveredOnce(t, e.received(t, ex, 2), []string{"fits", "m2"})
	wantDials(t, e, 1)
}

// A MustDeliver message to a missing exchange, and one that is unroutable,
// go to the dead-letter exchange with the reason and original route.
func testMustDeliverDLX(t *testing.T, e env) {
	ex, dlx, lost := e.bound(t), e.bound(t), e.unbound(t)
	h := start(t, e, Config{DeadLetterExchange: dlx})
	missing := msg("missing", uniqueName("no_such_exchange"), "k.missing")
	missing.MustDeliver = true
	unroutable := msg("unroutable", lost, "k.lost")
	unroutable.MustDeliver = true
	longID := msg("long-id", ex, "k")
	longID.MustDeliver = true
	longID.Msg.Publishing.MessageId = strings.Repeat("x", 300)
	rs := h.roundTrip(msg("m1", ex, "k"), missing, unroutable, msg("m2", ex, "k"), longID)
	wantErrs(t, rs, nil)
	if r := rs[4]; !r.DeadLettered || !strings.Contains(r.Reason, "message id is 300 bytes") {
		t.Errorf("long-id: DeadLettered=%v Reason=%q, want dead-lettered for its id", r.DeadLettered, r.Reason)
	}
	for i, want := range []string{"exchange does not exist", "unroutable"} {
		r := rs[i+1]
		if !r.DeadLettered || !strings.Contains(r.Reason, want) {
			t.Errorf("%s: DeadLettered=%v Reason=%q, want dead-lettered because %q", r.Job.Tag, r.DeadLettered, r.Reason, want)
		}
	}
	got := e.received(t, dlx, 3)
	if p := got[len(got)-1]; p.MessageId != "" || p.Headers["x-relay-original-message-id"] != longID.Msg.Publishing.MessageId {
		t.Errorf("dead-letter copy of long-id: id %q, headers %v; want the id moved to a header", p.MessageId, p.Headers)
	}
	for i, j := range []Job[string]{missing, unroutable} {
		p := got[i]
		if p.MessageId != j.Msg.Publishing.MessageId || string(p.Body) != string(j.Msg.Publishing.Body) ||
			p.Headers[HeaderOriginalExchange] != j.Msg.Exchange || p.Headers[HeaderOriginalRoutingKey] != j.Msg.RoutingKey ||
			p.Headers[HeaderReason] != rs[i+1].Reason {
			t.Errorf("dead-letter copy %d = %s %q %v, want %s with its route and reason", i, p.MessageId, p.Body, p.Headers, j.Msg.Publishing.MessageId)
		}
	}
	wantDeliveredOnce(t, e.received(t, ex, 2), []string{"m1", "m2"})
	wantDials(t, e, 1)
}

// Without a dead-letter exchange a MustDeliver message to a missing
// exchange holds the stream, visible in Holding(), until the exchange is
// created; then it and everything behind it is delivered and the hold
// clears.
func testMustDeliverHold(t *testing.T, e env) {
	ex := e.bound(t)
	name := uniqueName("late_exchange")
	h := start(t, e, Config{HoldBackoff: HoldBackoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}})
	late := msg("late", name, "k")
	late.MustDeliver = true
	h.send(msg("m1", ex, "k"), late, msg("m2", ex, "k"))
	if rs := h.results(1); rs[0].Err != nil {
		t.Fatalf("m1: %v", rs[0].Err)
	}
	hold := h.waitHold(2)
	if hold.MessageID != "late" || hold.Exchange != name || !strings.Contains(hold.Reason, "exchange does not exist") || hold.Since.IsZero() {
		t.Errorf("Holding() = %+v", hold)
	}
	select {
	case r := <-h.out:
		t.Fatalf("result %v while the stream is held", r.Job.Tag)
	default:
	}
	e.declare(t, name)
	rs := h.results(2)
	wantOrder(t, rs, []string{"late", "m2"})
	wantErrs(t, rs, nil)
	if rs[0].DeadLettered {
		t.Errorf("late was dead-lettered without a dead-letter exchange")
	}
	if hh, ok := h.p.Holding(); ok {
		t.Errorf("Holding() = %+v after delivery", hh)
	}
	wantDeliveredOnce(t, e.received(t, name, 1), []string{"late"})
	wantDials(t, e, 1)
}

// 500 rows to a missing exchange cost a few passive checks, not one each.
func testMissingExchangeCached(t *testing.T, e env) {
	f := needFake(t, e, "count passive declares")
	h := start(t, e, Config{})
	names := ids("m", 500)
	rs := h.roundTrip(jobsTo("gone", names)...)
	for _, r := range rs {
		if !errors.Is(r.Err, ErrNoExchange) {
			t.Fatalf("%v: %v, want ErrNoExchange", r.Job.Tag, r.Err)
		}
	}
	if f.declares > 5 {
		t.Errorf("%d passive declares for one missing exchange", f.declares)
	}
	wantDials(t, e, 1)
}

// A connection that resets on every publish is redialled with backoff: the
// first few quickly, then at most once a second.
func testReconnectBackoff(t *testing.T, e env) {
	f, _, rs := scripted{why: "reset every connection", cfg: Config{ReconnectMin: 10 * time.Millisecond}, n: 1,
		script: func(p fakePub) outcome {
			if p.conn < 6 {
				return outcome{kind: closeConn}
			}
			return outcome{code: -1}
		}}.run(t, e)
	wantErrs(t, rs, nil)
	if e.dials() != 6 {
		t.Errorf("%d connections, want 6", e.dials())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 4; i < len(f.dialTimes); i++ {
		if gap := f.dialTimes[i].Sub(f.dialTimes[i-1]); gap < 990*time.Millisecond {
			t.Errorf("connection %d opened %s after the previous one, want at least 1s", i+1, gap)
		}
	}
}

// The dead-letter exchange itself is missing: the MustDeliver message holds
// the stream (alternating original and dead-letter attempts) until the
// dead-letter exchange exists, then goes there.
func testMustDeliverDLXMissing(t *testing.T, e env) {
	ex := e.bound(t)
	dlx := uniqueName("late_dlx")
	h := start(t, e, Config{DeadLetterExchange: dlx, HoldBackoff: HoldBackoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}})
	lost := msg("lost", uniqueName("no_such_exchange"), "k")
	lost.MustDeliver = true
	h.send(lost, msg("m1", ex, "k"))
	hold := h.waitHold(2)
	if hold.MessageID != "lost" || !strings.Contains(hold.Reason, dlx) {
		t.Errorf("Holding() = %+v, want the dead-letter exchange named as the reason", hold)
	}
	e.declare(t, dlx)
	rs := h.results(2)
	wantOrder(t, rs, []string{"lost", "m1"})
	wantErrs(t, rs, nil)
	if !rs[0].DeadLettered || !strings.Contains(rs[0].Reason, "exchange does not exist") {
		t.Errorf("lost: DeadLettered=%v Reason=%q", rs[0].DeadLettered, rs[0].Reason)
	}
	wantDeliveredOnce(t, e.received(t, dlx, 1), []string{"lost"})
	wantDials(t, e, 1)
}

// The broker is unreachable at start: the publisher keeps dialling with
// backoff and delivers once it is up; cancel still returns promptly.
func testBrokerDownAtStart(t *testing.T, e env) {
	f := needFake(t, e, "refuse connections")
	ex := e.bound(t)
	f.failDials = 3
	h := start(t, e, Config{ReconnectMin: 10 * time.Millisecond})
	rs := h.roundTrip(msg("m1", ex, "k"))
	wantErrs(t, rs, nil)
	if e.dials() != 4 {
		t.Errorf("%d dials, want 4 (three refused)", e.dials())
	}
	if !h.p.Connected() {
		t.Error("Connected() false after delivering")
	}
}

// Run returns nil once its input is closed and every result is out.
func testRunReturnsWhenInputCloses(t *testing.T, e env) {
	ex := e.bound(t)
	h := start(t, e, Config{})
	h.send(msg("m1", ex, "k"), Job[string]{Tag: "marker"})
	close(h.in)
	rs := h.results(2)
	wantOrder(t, rs, []string{"m1", "marker"})
	wantErrs(t, rs, nil)
	wantDials(t, e, 1)
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
		h.done <- err // for stop
	case <-time.After(3 * time.Second):
		t.Error("Run did not return within 3s of its input closing")
	}
}

package publisher

// Property test of the publisher's state machine (machine.go and the
// files of its events: head.go, close.go, connect.go, probe.go,
// publish.go) over the scripted fake broker, in a testing/synctest bubble
// (the hold and redial timers, the fake's slow confirms and the exchange
// cache run on the bubble's clock). A generated schedule gives the
// ordering mode, the window, the nodes, the dead-letter exchange, a stream
// of jobs (markers, messages to good, missing, unroutable and refused
// exchanges, MustDeliver or not), the broker's answer to each publish to a
// good exchange (ack, slow ack, multiple ack, nack, return, withheld,
// channel closed, connection closed, with reply codes) and events over
// time (withheld confirmations acked, a node down and up, dials refused,
// a connection reset, the consumer not taking results for a while, the
// lease lost, ctx cancelled). After every result
// and every step the invariants a user of the relay relies on are checked;
// a failing schedule is shrunk by rapid, and each one found is kept below
// as a named regression test. TestPropertyBatchConnGuard, at the end, does
// the same for the write buffer under a real connection (batchconn.go),
// which the fake broker does not go through.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"pgregory.net/rapid"
)

type pmMode int

const (
	pmRelaxed pmMode = iota
	pmStrict
	pmPerKey // strict per key (Config.PerKey)
)

func (m pmMode) String() string { return [...]string{"pmRelaxed", "pmStrict", "pmPerKey"}[m] }

// pmEx is a job's exchange.
type pmEx int

const (
	exGood    pmEx = iota // bound: the plan answers its publishes
	exGood2               // another bound one (probes, per-exchange proofs)
	exMissing             // 404 on the passive check: never published
	exUnbound             // no queue bound: every publish returned
	exDenied              // 403 ACCESS_REFUSED on every publish
)

var pmExNames = [...]string{"ex-a", "ex-b", "ex-missing", "ex-unbound", "denied-ex"}

func (e pmEx) String() string {
	return [...]string{"exGood", "exGood2", "exMissing", "exUnbound", "exDenied"}[e]
}

// doomed: every publish to it fails, whatever the plan says.
func (e pmEx) doomed() bool { return e >= exMissing }

// err is the failure a doomed exchange gives.
func (e pmEx) err() error {
	return [...]error{nil, nil, ErrNoExchange, ErrReturned, ErrRefused}[e]
}

type pmDLX int

const (
	dlxNone pmDLX = iota
	dlxBound
	dlxMissing
)

var pmDLXNames = [...]string{"", "dlx", "dlx-missing"}

func (d pmDLX) String() string { return [...]string{"dlxNone", "dlxBound", "dlxMissing"}[d] }

type pmJob struct {
	marker bool
	ex     pmEx
	key    uint64
	must   bool          // MustDeliver
	gap    time.Duration // before the job is offered
}

// pmOutcome is the broker's answer to one publish to a good exchange
// (the original's or the dead-letter exchange).
type pmOutcome struct {
	kind   outcomeKind
	code   int
	delay  time.Duration // before the confirmation (slow confirms)
	ackAll bool          // first ack every withheld confirmation (one multiple ack)
}

type pmEventKind int

const (
	evTick        pmEventKind = iota // time passes
	evAckWithheld                    // the withheld confirmations are acked (multiple acks)
	evNodeDown                       // a node stops: its connections closed (320), its dials refused
	evNodeUp
	evFailDials // the next n dials are refused
	evReset     // the connection is reset (no close frame)
	evStall     // the consumer stops taking results, or takes them again
	evLeaseLost // the guard fails from now on: a deposed leader
	evCancel    // ctx cancelled: Run must end
)

var pmEventNames = [...]string{"evTick", "evAckWithheld", "evNodeDown", "evNodeUp", "evFailDials", "evReset", "evStall", "evLeaseLost", "evCancel"}

type pmEvent struct {
	kind  pmEventKind
	after time.Duration // since the previous event
	n     int           // the node (evNodeDown, evNodeUp) or the dials (evFailDials)
}

type pmSchedule struct {
	mode   pmMode
	window int
	nodes  int
	dlx    pmDLX
	hold   time.Duration // HoldBackoff.Base; Max is 4 times it
	redial time.Duration // ReconnectMin; ReconnectMax is 2 s
	jobs   []pmJob
	plan   []pmOutcome // the answers to the publishes to good exchanges, in publish order; then ack
	events []pmEvent
}

// String prints s as the Go literal a regression test keeps.
func (s pmSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pmSchedule{mode: %v, window: %d, nodes: %d, dlx: %v, hold: %d * time.Millisecond, redial: %d * time.Millisecond,\n",
		s.mode, s.window, s.nodes, s.dlx, s.hold.Milliseconds(), s.redial.Milliseconds())
	b.WriteString("\tjobs: []pmJob{")
	for _, j := range s.jobs {
		if j.marker {
			fmt.Fprintf(&b, "{marker: true, gap: %d * time.Millisecond}, ", j.gap.Milliseconds())
			continue
		}
		fmt.Fprintf(&b, "{ex: %v, key: %d, must: %v, gap: %d * time.Millisecond}, ", j.ex, j.key, j.must, j.gap.Milliseconds())
	}
	b.WriteString("},\n\tplan: []pmOutcome{")
	kinds := [...]string{"ack", "nack", "ret", "withhold", "closeChannel", "closeConn"}
	for _, o := range s.plan {
		fmt.Fprintf(&b, "{kind: %s, code: %d, delay: %d * time.Millisecond, ackAll: %v}, ", kinds[o.kind], o.code, o.delay.Milliseconds(), o.ackAll)
	}
	b.WriteString("},\n\tevents: []pmEvent{")
	for _, e := range s.events {
		fmt.Fprintf(&b, "{kind: %s, after: %d * time.Millisecond, n: %d}, ", pmEventNames[e.kind], e.after.Milliseconds(), e.n)
	}
	b.WriteString("}}")
	return b.String()
}

func drawMachineSchedule(t *rapid.T) pmSchedule {
	s := pmSchedule{
		mode:   pmMode(rapid.IntRange(0, 2).Draw(t, "mode")),
		window: rapid.IntRange(1, 6).Draw(t, "window"),
		nodes:  rapid.IntRange(1, 3).Draw(t, "nodes"),
		dlx:    pmDLX(rapid.IntRange(0, 2).Draw(t, "dlx")),
		hold:   time.Duration(rapid.IntRange(1, 30).Draw(t, "hold")) * 10 * time.Millisecond,
		redial: time.Duration(rapid.IntRange(1, 30).Draw(t, "redial")) * 10 * time.Millisecond,
	}
	for range rapid.IntRange(0, 30).Draw(t, "jobs") {
		j := pmJob{marker: rapid.IntRange(0, 7).Draw(t, "marker") == 0}
		if !j.marker {
			j.ex = rapid.SampledFrom([]pmEx{exGood, exGood, exGood, exGood2, exGood2, exMissing, exUnbound, exDenied}).Draw(t, "exchange")
			j.key = uint64(rapid.IntRange(0, 2).Draw(t, "key"))
			j.must = rapid.IntRange(0, 3).Draw(t, "must") == 0
		}
		if rapid.IntRange(0, 3).Draw(t, "gapped") == 0 {
			j.gap = time.Duration(rapid.IntRange(1, 50).Draw(t, "gap")) * 10 * time.Millisecond
		}
		s.jobs = append(s.jobs, j)
	}
	for range rapid.IntRange(0, 30).Draw(t, "plan") {
		var o pmOutcome
		switch rapid.IntRange(0, 9).Draw(t, "outcome") {
		case 0, 1, 2:
			o.kind = ack
			o.ackAll = rapid.IntRange(0, 3).Draw(t, "ackAll") == 0
		case 3:
			o.kind = ack
			o.delay = time.Duration(rapid.IntRange(1, 200).Draw(t, "slow")) * 10 * time.Millisecond
		case 4:
			o.kind = nack
		case 5:
			o.kind = ret
		case 6, 7:
			o.kind = withhold
		case 8:
			o.kind = closeChannel
			o.code = rapid.SampledFrom([]int{403, 404, 406, 504}).Draw(t, "channel-code")
		case 9:
			o.kind = closeConn
			o.code = rapid.SampledFrom([]int{0, 320, 501}).Draw(t, "connection-code")
		}
		if o.delay == 0 && o.kind != closeChannel && o.kind != closeConn && rapid.Bool().Draw(t, "latency") {
			// The answer takes a round trip: what the broker does
			// meanwhile (a close behind it) is there when the machine wakes.
			o.delay = time.Duration(rapid.IntRange(1, 5).Draw(t, "latency-ms")) * time.Millisecond
		}
		s.plan = append(s.plan, o)
	}
	for range rapid.IntRange(0, 8).Draw(t, "events") {
		e := pmEvent{kind: pmEventKind(rapid.IntRange(0, int(evCancel)).Draw(t, "event")),
			after: time.Duration(rapid.IntRange(0, 30).Draw(t, "after")) * 100 * time.Millisecond}
		switch e.kind {
		case evNodeDown, evNodeUp:
			e.n = rapid.IntRange(0, s.nodes-1).Draw(t, "node")
		case evFailDials:
			e.n = rapid.IntRange(1, 5).Draw(t, "dials")
		}
		s.events = append(s.events, e)
	}
	return s
}

var pmDebug = os.Getenv("PM_DEBUG") != ""

// pmMaxPublishes caps a case: a machine that spins publishes without end.
const pmMaxPublishes = 2000

var errLeaseLost = errors.New("the lease is lost")

// pmWorld is one case: the fake broker, the publisher and what the test
// saw.
type pmWorld struct {
	s    pmSchedule
	f    *fakeBroker
	p    *Publisher
	urls []string
	byID map[string]int // message id -> job index
	// doomedAt is the first job that can never be delivered and must hold
	// the stream (len(jobs) if none): no job from it on gets a result.
	doomedAt int

	// Under f.mu (the fake runs the script with it held).
	planned  int // plan entries used
	faults   int // plan answers other than an ack
	connLoss int // connections the broker closed
	conns    []pmConn
	dials    int
	lostAt   int // publishes when the lease was lost; -1 before

	lost atomic.Bool

	rmu     sync.Mutex
	results []Result[string]

	vmu  sync.Mutex
	verr error

	start time.Time
}

type pmConn struct {
	url  string
	conn *fakeConn
}

func newPMWorld(s pmSchedule) *pmWorld {
	w := &pmWorld{s: s, f: newFakeBroker(), byID: map[string]int{}, lostAt: -1, doomedAt: len(s.jobs)}
	for i := range s.nodes {
		w.urls = append(w.urls, fmt.Sprintf("amqp://node%d:5672/", i+1))
	}
	w.f.addExchange(pmExNames[exGood], true)
	w.f.addExchange(pmExNames[exGood2], true)
	w.f.addExchange(pmExNames[exUnbound], false)
	w.f.addExchange(pmExNames[exDenied], true) // exists; "denied" names get 403 on publish
	w.f.addExchange(pmDLXNames[dlxBound], true)
	w.f.down = map[string]bool{}
	w.f.script = w.script
	for i, j := range s.jobs {
		if j.marker {
			continue
		}
		w.byID[pmID(i)] = i
		mustRetry := j.must || s.mode != pmRelaxed
		if w.doomedAt == len(s.jobs) && j.ex.doomed() && mustRetry && (!j.must || s.dlx != dlxBound) {
			w.doomedAt = i
		}
	}
	return w
}

func pmID(i int) string { return fmt.Sprintf("j-%02d", i) }

func (w *pmWorld) job(i int) Job[string] {
	j := w.s.jobs[i]
	if j.marker {
		return Job[string]{Tag: pmID(i)}
	}
	job := msg(pmID(i), pmExNames[j.ex], "k")
	job.Key, job.MustDeliver = j.key, j.must
	return job
}

func (w *pmWorld) violate(format string, args ...any) {
	w.vmu.Lock()
	defer w.vmu.Unlock()
	if w.verr == nil {
		w.verr = fmt.Errorf("at %s: "+format, append([]any{time.Since(w.start)}, args...)...)
	}
}

func (w *pmWorld) err() error {
	w.vmu.Lock()
	defer w.vmu.Unlock()
	return w.verr
}

func pmDoomedName(name string) bool {
	return name == pmExNames[exMissing] || name == pmExNames[exUnbound] || name == pmExNames[exDenied] || name == pmDLXNames[dlxMissing]
}

// script answers a publish (f.mu held): a doomed exchange answers as the
// broker does; a good one by the plan, then ack. It checks invariant 4
// first.
func (w *pmWorld) script(p fakePub) outcome {
	if len(w.f.published) > pmMaxPublishes {
		w.violate("more than %d publishes: the machine spins", pmMaxPublishes)
		return outcome{kind: withhold} // fills the window: the machine stops
	}
	w.checkPublishOrder(p)
	if pmDoomedName(p.exchange) || w.planned >= len(w.s.plan) {
		return outcome{code: -1}
	}
	o := w.s.plan[w.planned]
	w.planned++
	out := outcome{kind: o.kind, code: o.code, delay: o.delay}
	if o.ackAll {
		out.ackUpTo = 1 << 62
	}
	switch o.kind {
	case ack, withhold:
	case closeChannel:
		out.text = map[int]string{403: "ACCESS_REFUSED - write access refused", 404: "NOT_FOUND - no exchange",
			406: "PRECONDITION_FAILED - message refused", 504: "CHANNEL_ERROR - expected 'channel.open'"}[o.code]
		w.faults++
	case closeConn:
		out.text = map[int]string{0: "", 320: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'",
			501: "FRAME_ERROR - type 3, all octets = <<>>"}[o.code]
		w.faults++
		w.connLoss++
	default:
		w.faults++
	}
	return out
}

// delivered reports whether the broker routed a publish of message id via
// exchange ("" for any) and the client got its ack (f.mu held).
func (w *pmWorld) delivered(id, exchange string) bool {
	for _, q := range w.f.routed {
		if q.msg.MessageId == id && (exchange == "" || q.exchange == exchange) && w.f.acked[fakeTag{q.ch, q.seq}] {
			return true
		}
	}
	return false
}

// checkPublishOrder is invariant 4 (f.mu held): in strict mode a message
// is first published only once every earlier message is delivered (a
// failure there is never final: it is retried or dead-lettered); strict
// per key, every earlier message of its key.
func (w *pmWorld) checkPublishOrder(p fakePub) {
	i, ok := w.byID[p.msg.MessageId]
	if !ok || p.attempt != 1 || w.s.mode == pmRelaxed {
		return
	}
	for j := range i {
		jb := w.s.jobs[j]
		if jb.marker || (w.s.mode == pmPerKey && jb.key != w.s.jobs[i].key) {
			continue
		}
		if !w.delivered(pmID(j), "") {
			w.violate("%v: %s (key %d) published before %s (key %d) was confirmed", w.s.mode, pmID(i), w.s.jobs[i].key, pmID(j), jb.key)
			return
		}
	}
}

// onResult checks each result as it arrives: invariants 1 to 3.
func (w *pmWorld) onResult(r Result[string]) {
	w.rmu.Lock()
	k := len(w.results)
	w.results = append(w.results, r)
	w.rmu.Unlock()
	if k >= len(w.s.jobs) || r.Job.Tag != pmID(k) {
		w.violate("result %d is for %s: results come in job order, one per job", k+1, r.Job.Tag)
		return
	}
	if k >= w.doomedAt {
		w.violate("a result (err %v) for %s, behind %s, which can never be delivered and holds the stream", r.Err, pmID(k), pmID(w.doomedAt))
	}
	j := w.s.jobs[k]
	if j.marker {
		if r.Err != nil || r.DeadLettered {
			w.violate("marker %s: result %+v", pmID(k), r)
		}
		return
	}
	if r.Err == nil {
		via := pmExNames[j.ex]
		if r.DeadLettered {
			if !j.must || w.s.dlx == dlxNone {
				w.violate("%s dead-lettered, but it is not MustDeliver or there is no dead-letter exchange", pmID(k))
			}
			via = pmDLXNames[w.s.dlx]
		}
		w.f.mu.Lock()
		ok := w.delivered(pmID(k), via)
		w.f.mu.Unlock()
		if !ok {
			w.violate("Ok result for %s (dead-lettered %v), which the broker did not route via %s and ack", pmID(k), r.DeadLettered, via)
		}
		return
	}
	if j.must || w.s.mode != pmRelaxed {
		w.violate("%s (MustDeliver %v, %v) reported as failed: %v", pmID(k), j.must, w.s.mode, r.Err)
	}
	if want := j.ex.err(); want != nil && !errors.Is(r.Err, want) {
		w.violate("%s to %s failed with %v, want %v", pmID(k), pmExNames[j.ex], r.Err, want)
	}
	if !slicesContainsErr(r.Err, ErrReturned, ErrNacked, ErrNoExchange, ErrRefused) {
		w.violate("%s failed with %v, which names no broker outcome", pmID(k), r.Err)
	}
}

func slicesContainsErr(err error, kinds ...error) bool {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

func (w *pmWorld) resultCount() int {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	return len(w.results)
}

// dial is the publisher's dialFunc: the fake's, counted, and each
// connection kept with its node.
func (w *pmWorld) dial(ctx context.Context, url string) (amqpConn, error) {
	w.f.mu.Lock()
	w.dials++
	spin := w.dials > pmMaxPublishes
	w.f.mu.Unlock()
	if spin {
		w.violate("more than %d dials: the machine spins", pmMaxPublishes)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c, err := w.f.dial(ctx, url)
	if err == nil {
		w.f.mu.Lock()
		w.conns = append(w.conns, pmConn{url, c.(*fakeConn)})
		w.f.mu.Unlock()
	}
	return c, err
}

// closeConns closes the connections to url ("" for all) from the broker's
// side with e.
func (w *pmWorld) closeConns(url string, e *amqp.Error) {
	w.f.mu.Lock()
	var cs []*fakeConn
	for _, c := range w.conns {
		if (url == "" || c.url == url) && !c.conn.IsClosed() {
			cs = append(cs, c.conn)
		}
	}
	w.connLoss += len(cs)
	w.f.mu.Unlock()
	for _, c := range cs {
		c.shutdown(e, true)
	}
}

// checkStep checks what is checked between steps: invariant 5 (nothing
// published after the lease was lost) and 6 (retries back off: the
// publishes of each message and the dials are bounded by the broker's
// failures and the time that passed).
func (w *pmWorld) checkStep() {
	elapsed := time.Since(w.start)
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	if w.lostAt >= 0 && len(w.f.published) > w.lostAt {
		w.violate("a leader whose lease was lost published %d messages after it (first %s)",
			len(w.f.published)-w.lostAt, w.f.published[w.lostAt].msg.MessageId)
	}
	perMsg := map[string]int{}
	for _, p := range w.f.published {
		perMsg[p.msg.MessageId]++
	}
	bound := 3 + 2*w.faults + 2*int(elapsed/w.s.hold)
	for id, n := range perMsg {
		if n > bound {
			w.violate("%s published %d times in %s with %d broker failures (hold base %s): no backoff", id, n, elapsed, w.faults, w.s.hold)
		}
	}
	if bound := w.s.nodes * (2 + w.connLoss + int(elapsed/w.s.redial)); w.dials > bound {
		w.violate("%d dials in %s with %d connections lost (%d nodes, reconnect min %s): no backoff", w.dials, elapsed, w.connLoss, w.s.nodes, w.s.redial)
	}
}

// runMachineSchedule runs s in a bubble and returns the first violation.
func runMachineSchedule(t *testing.T, s pmSchedule) error {
	var verr error
	synctest.Test(t, func(t *testing.T) {
		verr = runMachineBubble(t, s)
	})
	return verr
}

func runMachineBubble(t *testing.T, s pmSchedule) (verr error) {
	w := newPMWorld(s)
	cfg := Config{URLs: w.urls, Window: s.window, Strict: s.mode != pmRelaxed, PerKey: s.mode == pmPerKey,
		ReconnectMin: s.redial, ReconnectMax: 2 * time.Second, DeadLetterExchange: pmDLXNames[s.dlx],
		HoldBackoff: HoldBackoff{Base: s.hold, Max: 4 * s.hold}}
	p, err := New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	p.dial = w.dial
	p.SetGuard(func() error {
		if w.lost.Load() {
			return errLeaseLost
		}
		return nil
	})
	w.p = p
	w.start = time.Now()

	ctx, cancel := context.WithCancel(context.Background())
	in := make(chan Job[string])
	out := make(chan Result[string])
	done := make(chan error, 1)
	go func() { done <- Stream[string]{p}.Run(ctx, in, out) }()
	go func() {
		for i, j := range s.jobs {
			if j.gap > 0 {
				select {
				case <-time.After(j.gap):
				case <-ctx.Done():
					return
				}
			}
			select {
			case in <- w.job(i):
			case <-ctx.Done():
				return
			}
		}
		close(in)
	}()
	stopCollector := make(chan struct{})
	collected := make(chan struct{})
	stall := make(chan bool)
	stalled := false
	go func() {
		defer close(collected)
		paused := false
		for {
			results := out
			if paused {
				results = nil
			}
			select {
			case r := <-results:
				w.onResult(r)
			case paused = <-stall:
			case <-stopCollector:
				return
			}
		}
	}()
	ended, stopped, cancelled := false, false, false
	var runErr error
	defer func() { // nothing left running in the bubble
		cancel()
		if !ended {
			<-done
		}
		close(stopCollector)
		<-collected
		for _, c := range w.f.chans {
			c.shutdown(nil)
		}
		time.Sleep(3 * time.Second) // past the slowest confirm a channel is sleeping on
	}()
	if pmDebug {
		defer func() {
			if verr != nil {
				w.dump()
			}
		}()
	}
	poll := func() {
		if ended {
			return
		}
		select {
		case runErr = <-done:
			ended = true
		default:
		}
	}
	// stop cancels ctx and waits for Run: invariant 7.
	stop := func() {
		stopped, cancelled = true, true
		cancel()
		if ended {
			return
		}
		select {
		case runErr = <-done:
			ended = true
		case <-time.After(3 * time.Second):
			w.violate("Run did not return within 3 s of ctx cancel")
		}
	}
	step := func() error {
		synctest.Wait()
		poll()
		w.checkStep()
		if ended && runErr != nil && !(stopped && (errors.Is(runErr, errLeaseLost) || errors.Is(runErr, context.Canceled))) {
			w.violate("Run returned %v", runErr)
		}
		return w.err()
	}

	if err := step(); err != nil {
		return err
	}
	for i, ev := range s.events {
		time.Sleep(ev.after)
		synctest.Wait()
		switch ev.kind {
		case evAckWithheld:
			w.f.ackWithheld()
		case evNodeDown:
			w.f.mu.Lock()
			w.f.down[w.urls[ev.n]] = true
			w.f.mu.Unlock()
			w.closeConns(w.urls[ev.n], &amqp.Error{Code: 320, Reason: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'", Server: true})
		case evNodeUp:
			w.f.mu.Lock()
			delete(w.f.down, w.urls[ev.n])
			w.f.mu.Unlock()
		case evFailDials:
			w.f.mu.Lock()
			w.f.failDials = ev.n
			w.f.mu.Unlock()
		case evReset:
			w.closeConns("", &amqp.Error{Code: 0, Reason: "connection reset by peer"})
		case evStall:
			stalled = !stalled
			stall <- stalled
		case evLeaseLost:
			stopped = true
			w.f.mu.Lock()
			if w.lostAt < 0 {
				w.lostAt = len(w.f.published)
			}
			w.f.mu.Unlock()
			w.lost.Store(true)
		case evCancel:
			stopped = true
			stop()
		}
		if err := step(); err != nil {
			return fmt.Errorf("after event %d (%s): %w", i+1, pmEventNames[ev.kind], err)
		}
		if cancelled {
			break
		}
	}

	if !stopped {
		// The broker heals: every node up, dials answered, withheld
		// confirmations acked, the plan runs out (then every publish to a
		// good exchange is acked). Every job before the first that can
		// never be delivered gets its result (invariant 1); that one holds
		// the stream.
		if stalled {
			stall <- false
		}
		w.f.mu.Lock()
		clear(w.f.down)
		w.f.failDials = 0
		w.f.mu.Unlock()
		for i := 0; ; i++ {
			w.f.ackWithheld()
			time.Sleep(time.Second)
			if err := step(); err != nil {
				return fmt.Errorf("after the broker healed: %w", err)
			}
			n := w.resultCount()
			if ended {
				if n != len(s.jobs) || w.doomedAt != len(s.jobs) {
					return fmt.Errorf("Run returned %v with %d results of %d jobs (%s never deliverable)", runErr, n, len(s.jobs), pmID(w.doomedAt))
				}
				break
			}
			if h, ok := p.Holding(); ok && n == w.doomedAt && h.MessageID == pmID(w.doomedAt) {
				break // it holds behind the message that can never be delivered
			}
			if i == 600 {
				h, _ := p.Holding()
				return fmt.Errorf("not settled 10 minutes after the broker healed: %d results of %d jobs, %d expected, holding %+v",
					n, len(s.jobs), w.doomedAt, h)
			}
		}
	}
	stop()
	return step()
}

// dump prints what the broker saw and the results, for PM_DEBUG=1.
func (w *pmWorld) dump() {
	if os.Getenv("PM_DEBUG") == "stacks" {
		buf := make([]byte, 1<<20)
		fmt.Printf("%s\n", buf[:runtime.Stack(buf, true)])
	}
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	routed := map[fakeTag]bool{}
	for _, p := range w.f.routed {
		routed[fakeTag{p.ch, p.seq}] = true
	}
	for _, p := range w.f.published {
		tag := fakeTag{p.ch, p.seq}
		fmt.Printf("publish conn %d ch %d seq %d %s via %s attempt %d routed %v acked %v\n",
			p.conn, p.ch, p.seq, p.msg.MessageId, p.exchange, p.attempt, routed[tag], w.f.acked[tag])
	}
	w.rmu.Lock()
	defer w.rmu.Unlock()
	for _, r := range w.results {
		fmt.Printf("result %s err %v dead-lettered %v\n", r.Job.Tag, r.Err, r.DeadLettered)
	}
}

// TestPropertyMachine runs generated schedules. rapid runs -rapid.checks
// cases per Check (100, a fifth with -short): fifty Checks make 1,000
// schedules with -short, 5,000 without.
func TestPropertyMachine(t *testing.T) {
	for range 50 {
		if t.Failed() {
			return
		}
		rapid.Check(t, func(rt *rapid.T) {
			s := drawMachineSchedule(rt)
			if pmDebug {
				fmt.Println(s)
			}
			if err := runMachineSchedule(t, s); err != nil {
				rt.Fatalf("%v\nschedule:\n%s", err, s)
			}
		})
	}
}

// runMachineRegression runs a kept schedule several times: the machine's
// goroutine and the fake broker's interleave differently from run to run.
func runMachineRegression(t *testing.T, s pmSchedule) {
	t.Helper()
	for range 20 {
		if err := runMachineSchedule(t, s); err != nil {
			t.Fatalf("%v\nschedule:\n%s", err, s)
		}
	}
}

// The broker closes the channel over j-02 (406) right after acking j-01;
// the machine takes j-01's ack first and publishes j-03 (queued while the
// first connection was down) onto the closed channel. The publish finds
// the refusal: j-02 is its culprit and fails, the connection is kept, and
// the channel must be reopened at once. Before the fix step reopened it
// only on the next event, and there was none (no session, no redial, the
// input closed): j-03 was never published. "after the broker healed: not
// settled 10 minutes after the broker healed: 3 results of 4 jobs, 4
// expected, holding {MessageID: ...}".
func TestPropertyRegressionRefusalFoundByPublishStalls(t *testing.T) {
	runMachineRegression(t, pmSchedule{mode: pmRelaxed, window: 2, nodes: 1, dlx: dlxNone, hold: 10 * time.Millisecond, redial: 10 * time.Millisecond,
		jobs: []pmJob{{ex: exGood}, {ex: exGood}, {ex: exGood}, {ex: exGood}},
		plan: []pmOutcome{{kind: closeConn, code: 320}, {kind: ack}, {kind: ack, delay: 100 * time.Millisecond}, {kind: closeChannel, code: 406}}})
}

// The write buffer under the connection (batchconn.go), which the fake
// broker does not go through: generated writes, a peer that reads in
// generated pieces with pauses, the guard failing and Close at generated
// points. Checked: the peer gets a prefix of what was written, unchanged
// and in order; after the guard fails at most the chunk being written
// goes out, and Write then fails; everything written arrives when neither
// happens; Close releases everything (the bubble ends with no goroutine
// left).
type bcSchedule struct {
	writes []int // sizes
	reads  []bcRead
	lostAt int // the guard fails after this many writes (-1: never)
	// closeAt: Close after this many writes (-1: at the end)
	closeAt int
}

type bcRead struct {
	n     int
	pause time.Duration
}

func drawBatchConnSchedule(t *rapid.T) bcSchedule {
	s := bcSchedule{lostAt: -1, closeAt: -1}
	for range rapid.IntRange(1, 24).Draw(t, "writes") {
		s.writes = append(s.writes, rapid.IntRange(1, 3*writeChunk).Draw(t, "size"))
	}
	for range rapid.IntRange(1, 8).Draw(t, "reads") {
		s.reads = append(s.reads, bcRead{n: rapid.IntRange(256, 2*writeChunk).Draw(t, "read"),
			pause: time.Duration(rapid.IntRange(0, 5).Draw(t, "pause")) * 10 * time.Millisecond})
	}
	if rapid.Bool().Draw(t, "lose") {
		s.lostAt = rapid.IntRange(0, len(s.writes)).Draw(t, "lostAt")
	}
	if rapid.IntRange(0, 3).Draw(t, "close") == 0 {
		s.closeAt = rapid.IntRange(0, len(s.writes)).Draw(t, "closeAt")
	}
	return s
}

func runBatchConnSchedule(t *testing.T, s bcSchedule) error {
	var verr error
	synctest.Test(t, func(t *testing.T) { verr = runBatchConnBubble(s) })
	return verr
}

func runBatchConnBubble(s bcSchedule) error {
	client, server := net.Pipe()
	var lost atomic.Bool
	b := newBatchConn(client, func() error {
		if lost.Load() {
			return errLeaseLost
		}
		return nil
	})
	var mu sync.Mutex
	var got []byte
	readerDone := make(chan struct{})
	go func() { // the peer: reads in the drawn pieces, the last one again and again
		defer close(readerDone)
		for i := 0; ; i++ {
			r := s.reads[min(i, len(s.reads)-1)]
			time.Sleep(r.pause)
			buf := make([]byte, r.n)
			n, err := server.Read(buf)
			mu.Lock()
			got = append(got, buf[:n]...)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	defer func() { // nothing left running in the bubble
		_ = b.Close()
		_ = server.Close()
		<-readerDone
	}()
	received := func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	var written []byte
	atLost, closed, failed := -1, false, false
	next := byte(0)
	for i := 0; i <= len(s.writes); i++ {
		if i == s.lostAt {
			synctest.Wait() // the flusher is blocked or idle, not between guard and write
			atLost = len(received())
			lost.Store(true)
		}
		if i == s.closeAt {
			_ = b.Close()
			closed = true
		}
		if i == len(s.writes) || failed {
			continue
		}
		p := make([]byte, s.writes[i])
		for j := range p {
			p[j], next = next, next+1 // a counter: a byte lost, repeated or moved shows
		}
		_, err := b.Write(p)
		switch {
		case err == nil:
			written = append(written, p...)
		case closed && errors.Is(err, net.ErrClosed), atLost >= 0 && errors.Is(err, errLeaseLost):
			failed = true
		default:
			return fmt.Errorf("write %d (%d bytes): %v", i+1, len(p), err)
		}
	}
	if atLost < 0 && !closed {
		for range 1000 { // the peer reads at most every 50 ms
			if len(received()) >= len(written) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if n := len(received()); n != len(written) {
			return fmt.Errorf("%d bytes of %d written reached the peer; nothing failed", n, len(written))
		}
	}
	if atLost >= 0 {
		// The chunk in progress goes out (at 256 bytes every 50 ms at
		// worst), then the flusher meets the guard and closes the socket.
		// A Write is only appended: the one that makes the flusher meet
		// the guard may return nil, the next one fails.
		time.Sleep(10 * time.Second)
		for range 2 {
			if _, err := b.Write([]byte{next}); err == nil {
				written = append(written, next)
			} else if !closed && !errors.Is(err, errLeaseLost) {
				return fmt.Errorf("a Write after the guard failed returned %v; want the guard's error", err)
			}
			next++
			time.Sleep(10 * time.Second)
		}
		if _, err := b.Write([]byte{next}); !closed && !errors.Is(err, errLeaseLost) {
			return fmt.Errorf("a Write after the guard failed returned %v; want the guard's error", err)
		}
	}
	_ = b.Close()
	<-readerDone // it reads what the flusher wrote, then EOF
	r := received()
	if !bytes.Equal(r, written[:min(len(r), len(written))]) || len(r) > len(written) {
		return fmt.Errorf("the peer got %d bytes that are not a prefix of the %d written", len(r), len(written))
	}
	if atLost >= 0 && len(r)-atLost > writeChunk {
		return fmt.Errorf("%d bytes reached the peer after the guard failed; want at most the chunk in progress (%d)", len(r)-atLost, writeChunk)
	}
	return nil
}

// TestPropertyBatchConnGuard runs generated write buffer schedules: 200
// with -short, 1,000 without.
func TestPropertyBatchConnGuard(t *testing.T) {
	for range 10 {
		if t.Failed() {
			return
		}
		rapid.Check(t, func(rt *rapid.T) {
			s := drawBatchConnSchedule(rt)
			if err := runBatchConnSchedule(t, s); err != nil {
				rt.Fatalf("%v\nschedule: %+v", err, s)
			}
		})
	}
}

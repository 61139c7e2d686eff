package streamlane_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/streamlane"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// lane is internal/relay's Lane interface over this test's tags: a
// *Lane[relay.Ticket] is one of the relay's lanes.
type lane interface {
	Run(ctx context.Context, in <-chan publisher.Job[int], out chan<- publisher.Result[int]) error
	Connected() bool
	Holding() (publisher.Hold, bool)
}

var _ lane = (*streamlane.Lane[int])(nil)

func TestPublishInOrder(t *testing.T) {
	cfg := config(t)
	l := newLane(t, cfg)
	if last, err := l.LastPublishingID(context.Background()); err != nil || last != 0 {
		t.Fatalf("LastPublishingID before the stream exists = %d, %v; want 0", last, err)
	}
	js := jobs(1, 2000, 7)
	start := time.Now()
	results, err := run(t, l, js, time.Minute)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkInOrder(t, js, results)
	t.Logf("%d jobs (2000 messages) published and confirmed in %s", len(js), time.Since(start).Round(time.Millisecond))
	if l.Connected() {
		t.Error("Connected after Run returned")
	}
	checkStream(t, readStream(t, cfg.Stream, 30*time.Second), 1, 2000)
	last, err := l.LastPublishingID(context.Background())
	if err != nil || last != 2000 {
		t.Fatalf("LastPublishingID = %d, %v; want 2000", last, err)
	}
}

// A replay overlapping what is stored is confirmed whole and stored once:
// the broker drops the ids at or below the producer's last one.
func TestReplayIsDeduplicated(t *testing.T) {
	cfg := config(t)
	for _, r := range []struct{ from, to int }{{1, 2000}, {1001, 3000}, {1, 500}} {
		js := jobs(r.from, r.to, 50)
		results, err := run(t, newLane(t, cfg), js, time.Minute)
		if err != nil {
			t.Fatalf("run %d..%d: %v", r.from, r.to, err)
		}
		checkInOrder(t, js, results)
	}
	checkStream(t, readStream(t, cfg.Stream, 30*time.Second), 1, 3000)
	last, err := newLane(t, cfg).LastPublishingID(context.Background())
	if err != nil || last != 3000 {
		t.Fatalf("LastPublishingID = %d, %v; want 3000", last, err)
	}
}

// A stream already there is used as it is, whatever its arguments.
func TestExistingStream(t *testing.T) {
	cfg := config(t)
	if err := adminEnv(t).DeclareStream(cfg.Stream, stream.NewStreamOptions().SetMaxAge(time.Hour)); err != nil {
		t.Fatal(err)
	}
	cfg.MaxAge = 2 * time.Hour
	js := jobs(1, 3, 0)
	results, err := run(t, newLane(t, cfg), js, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkInOrder(t, js, results)
}

// A message the lane cannot publish safely fails alone, before it is
// sent, and the lane goes on.
func TestRefusedBeforeSending(t *testing.T) {
	cfg := config(t)
	cfg.MaxFrameBytes = 8192
	big := message(4)
	big.Publishing.Body = bytes.Repeat([]byte("x"), 9000)
	js := []publisher.Job[int]{
		{Msg: message(1), Seq: 1, Tag: 0},
		{Msg: message(2), Seq: 0, Tag: 1}, // no id
		{Msg: message(3), Seq: 3, Tag: 2},
		{Msg: message(2), Seq: 2, Tag: 3}, // below the one before
		{Msg: big, Seq: 4, Tag: 4},        // over one frame
		{Tag: 5},
		{Msg: message(5), Seq: 5, Tag: 6},
	}
	results, err := run(t, newLane(t, cfg), js, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(results) != len(js) {
		t.Fatalf("%d results for %d jobs", len(results), len(js))
	}
	for i, r := range results {
		refused := i == 1 || i == 3 || i == 4
		if r.Job.Tag != i || refused != errors.Is(r.Err, streamlane.ErrRefused) || (!refused && r.Err != nil) {
			t.Fatalf("result %d: job %d, err %v", i, r.Job.Tag, r.Err)
		}
	}
	got := readStream(t, cfg.Stream, 30*time.Second)
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "m-1,m-3,m-5" {
		t.Fatalf("stream holds %v, want m-1,m-3,m-5", ids)
	}
}

// feed runs the lane over an endless supply of jobs (publishing ids from
// 1, a marker after every tenth message) until Run returns; act is called
// with the number of results so far after each result until it returns
// true. It returns the jobs the lane took, its results and Run's error,
// and fails the test when Run is not back within d of act's end.
type fed struct {
	taken   int
	results []publisher.Result[int]
	err     error
	took    time.Duration // from act's end to Run's return
}

func feed(t *testing.T, l *streamlane.Lane[int], ctx context.Context, d time.Duration, act func(n int) bool) fed {
	t.Helper()
	in := make(chan publisher.Job[int]) // unbuffered: a send done is a job taken
	out := make(chan publisher.Result[int], 16)
	done := make(chan error, 1)
	stop, fedAll := make(chan struct{}), make(chan struct{})
	var taken atomic.Int64
	go func() { done <- l.Run(ctx, in, out) }()
	go func() {
		defer close(fedAll)
		seq := 0
		for i := 0; ; i++ {
			j := publisher.Job[int]{Tag: i}
			if i%11 != 10 {
				seq++
				j.Msg, j.Seq = message(seq), uint64(seq)
			}
			select {
			case in <- j:
				taken.Add(1)
			case <-stop:
				return
			}
		}
	}()
	var f fed
	acting := true
	var ended time.Time
	var deadline <-chan time.Time
	for {
		select {
		case r := <-out:
			f.results = append(f.results, r)
			if acting && act(len(f.results)) {
				acting, ended = false, time.Now()
				deadline = time.After(d)
			}
		case f.err = <-done:
			if !ended.IsZero() {
				f.took = time.Since(ended)
			}
			close(stop)
			<-fedAll // its count is final
			f.taken = int(taken.Load())
			for len(out) > 0 {
				f.results = append(f.results, <-out)
			}
			return f
		case <-deadline:
			t.Fatalf("Run did not return within %s of the fault (%d results)", d, len(f.results))
		case <-time.After(2 * time.Minute):
			t.Fatalf("no result nor return for 2 minutes (%d results)", len(f.results))
		}
	}
}

// checkFailed checks a failed lane's results: one per job taken, in order,
// a prefix confirmed and the rest failed (a marker behind a failed message
// failed too: its transaction is not settled), at least one failed, and
// Run's error.
func checkFailed(t *testing.T, f fed, want string) {
	t.Helper()
	if checkResults(t, f, want) == 0 {
		t.Fatalf("no failed result in %d: the fault came with nothing in flight?", len(f.results))
	}
}

// checkResults checks what checkFailed does but a failed result, and
// returns how many failed.
func checkResults(t *testing.T, f fed, want string) int {
	t.Helper()
	if f.err == nil || !strings.Contains(f.err.Error(), want) {
		t.Fatalf("Run returned %v, want an error with %q", f.err, want)
	}
	if len(f.results) != f.taken {
		t.Fatalf("%d results for %d jobs taken: a job was dropped", len(f.results), f.taken)
	}
	failed := 0
	for i, r := range f.results {
		if r.Job.Tag != i {
			t.Fatalf("result %d is job %d's", i, r.Job.Tag)
		}
		switch {
		case r.Job.Msg == nil && failed == 0:
			if r.Err != nil {
				t.Fatalf("marker %d failed before any message did: %v", i, r.Err)
			}
		case r.Job.Msg == nil:
			// Behind a message not confirmed: a commit applied here would
			// let the checkpoint pass that message (invariant 2).
			if !errors.Is(r.Err, streamlane.ErrUnconfirmed) {
				t.Fatalf("marker %d behind a failed message: %v, want ErrUnconfirmed", i, r.Err)
			}
		case r.Err != nil:
			if !errors.Is(r.Err, streamlane.ErrUnconfirmed) {
				t.Fatalf("result %d: %v, want ErrUnconfirmed", i, r.Err)
			}
			failed++
		case failed > 0:
			t.Fatalf("result %d confirmed after a failed one", i)
		}
	}
	t.Logf("%d jobs taken, %d failed results, Run back %s after the fault: %v",
		f.taken, failed, f.took.Round(time.Millisecond), f.err)
	return failed
}

func proxied(t *testing.T, p *faultproxy.Proxy) streamlane.Config {
	cfg := config(t)
	cfg.URIs = []string{streamURI(p.Addr())}
	return cfg
}

func TestConnectionLost(t *testing.T) {
	// The broker may confirm every message taken before the cut reaches
	// the lane (nothing in flight then, which is right too; a loaded
	// machine can get there): each try must keep every result, in order,
	// and at least one of three must catch messages in flight and fail them.
	var (
		p   *faultproxy.Proxy
		cfg streamlane.Config
		f   fed
	)
	for try := 1; ; try++ {
		p = testenv.Proxy(t, streamAddr())
		cfg = proxied(t, p)
		f = feed(t, newLane(t, cfg), context.Background(), 30*time.Second, func(n int) bool {
			if n < 2000 {
				return false
			}
			p.Cut()
			return true
		})
		// The client notices first as a failed write or as the producer it
		// closed, whichever comes first.
		if checkResults(t, f, "stream "+cfg.Stream+": ") > 0 {
			break
		}
		if try == 3 {
			t.Fatalf("in %d tries the cut never came with messages in flight", try)
		}
	}

	// What the relay does next: run the lane again, replaying from before
	// the failure. The stream ends up with every row once, in order.
	p.Restore()
	last := 0
	for _, r := range f.results {
		last = max(last, int(r.Job.Seq))
	}
	js := jobs(1, last, 10)
	results, err := run(t, newLane(t, cfg), js, time.Minute)
	if err != nil {
		t.Fatalf("replay after the failure: %v", err)
	}
	checkInOrder(t, js, results)
	checkStream(t, readStream(t, cfg.Stream, 30*time.Second), 1, last)
}

func TestStreamDeleted(t *testing.T) {
	// The broker may confirm every message taken before the lane hears of
	// the deletion (nothing in flight then, which is right too): each try
	// must keep every result, in order, and at least one of three must
	// catch messages in flight and fail them.
	for try := 1; ; try++ {
		cfg := config(t)
		l := newLane(t, cfg)
		f := feed(t, l, context.Background(), 30*time.Second, func(n int) bool {
			if n < 2000 {
				return false
			}
			deleteStream(t, cfg.Stream)
			return true
		})
		if checkResults(t, f, "stream "+cfg.Stream) > 0 {
			return
		}
		if try == 3 {
			t.Fatalf("in %d tries the deletion never came with messages in flight", try)
		}
	}
}

// swallow is a tap that forwards the client's bytes until quiet is set,
// then reads them and drops them: the broker hears nothing more, so it
// confirms nothing more, and the connection stays up.
func swallow(quiet *atomic.Bool) faultproxy.Tap {
	return func(server io.Writer, client io.Reader) {
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 && !quiet.Load() {
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
}

func TestConfirmTimeout(t *testing.T) {
	cfg, quiet := deafProxy(t)
	cfg.ConfirmTimeout = 2 * time.Second
	cfg.ConnectTimeout = 3 * time.Second
	f := feed(t, newLane(t, cfg), context.Background(), 20*time.Second, func(n int) bool {
		if n < 1000 {
			return false
		}
		quiet.Store(true)
		return true
	})
	checkFailed(t, f, "not confirmed within 2s")
}

// A lane failed on a broker that hears nothing returns at the failure, not
// after the closes' deadlines (ConnectTimeout each, on a connection that
// will not answer them): nothing is published meanwhile, and a SIGTERM then
// would find the pipeline still down. Run again at once, beside the old
// connection still closing, it replays under the same publishing ids and
// the stream holds every message once, in order.
func TestFailedLaneReturnsWithoutWaitingOutItsClose(t *testing.T) {
	cfg, quiet := deafProxy(t)
	cfg.ConfirmTimeout = 2 * time.Second
	cfg.ConnectTimeout = 15 * time.Second
	l := newLane(t, cfg)
	f := feed(t, l, context.Background(), 30*time.Second, func(n int) bool {
		if n < 1000 {
			return false
		}
		quiet.Store(true)
		return true
	})
	checkFailed(t, f, "not confirmed within 2s")
	// The confirm timeout ends it 2 s after the fault; the closes would
	// take up to twice 15 s more.
	if limit := cfg.ConfirmTimeout + cfg.ConnectTimeout/3; f.took > limit {
		t.Fatalf("Run returned %s after the fault, over %s: it waited on closing a connection that does not answer",
			f.took.Round(time.Millisecond), limit)
	}
	t.Logf("Run back %s after the fault", f.took.Round(time.Millisecond))

	quiet.Store(false) // the broker hears again; the old connection's lost bytes end it
	last := 0
	for _, r := range f.results {
		last = max(last, int(r.Job.Seq))
	}
	js := jobs(1, last+500, 10)
	results, err := run(t, l, js, time.Minute)
	if err != nil {
		t.Fatalf("Run again at once: %v", err)
	}
	checkInOrder(t, js, results)
	checkStream(t, readStream(t, cfg.Stream, 30*time.Second), 1, last+500)
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newLane(t, config(t))
	f := feed(t, l, ctx, 15*time.Second, func(n int) bool {
		if n < 1000 {
			return false
		}
		cancel()
		return true
	})
	if !errors.Is(f.err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", f.err)
	}
	for i, r := range f.results {
		if r.Job.Tag != i || r.Err != nil {
			t.Fatalf("result %d: job %d, err %v", i, r.Job.Tag, r.Err)
		}
	}
	t.Logf("Run back %s after the cancel, %d results of %d jobs taken", f.took.Round(time.Millisecond), len(f.results), f.taken)
}

// A cancel while the broker hears nothing (and so confirms nothing and
// answers no close): Run still returns, within the deadlines of closing.
func TestCancelWhileBrokerDeaf(t *testing.T) {
	cfg, quiet := deafProxy(t)
	cfg.ConnectTimeout = 3 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := feed(t, newLane(t, cfg), ctx, 15*time.Second, func(n int) bool {
		if n < 500 {
			return false
		}
		quiet.Store(true)
		cancel()
		return true
	})
	if !errors.Is(f.err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", f.err)
	}
	t.Logf("Run back %s after the cancel, %d results of %d jobs taken", f.took.Round(time.Millisecond), len(f.results), f.taken)
}

func TestOpenFailures(t *testing.T) {
	const secret = "s3cr3t-Pw-0n-the-wire"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	for _, c := range []struct {
		name, uri, want string
	}{
		{"closed port", "rabbitmq-stream://guest:" + secret + "@" + closed + "/", "connection refused"},
		{"wrong password", "rabbitmq-stream://guest:" + secret + "@" + streamAddr() + "/", "Authentication Failure"},
		{"no such vhost", "rabbitmq-stream://guest:guest@" + streamAddr() + "/no-such-vhost", "Virtual Host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config(t)
			cfg.URIs = []string{c.uri}
			l := newLane(t, cfg)
			in := make(chan publisher.Job[int], 1)
			in <- publisher.Job[int]{Msg: message(1), Seq: 1}
			out := make(chan publisher.Result[int], 1)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			err := l.Run(ctx, in, out)
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run returned %v after %s, want an error with %q", err, time.Since(start), c.want)
			}
			if len(in) != 1 || len(out) != 0 || l.Connected() {
				t.Fatalf("a failed open took a job (%d left) or gave a result (%d)", len(in), len(out))
			}
			_, qerr := l.LastPublishingID(ctx)
			noSecret(t, secret, err, qerr)
			t.Logf("Run back in %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// deafProxy is a lane config through a proxy to the stream port that, once
// quiet is set, passes nothing on either way: a broker that stops hearing.
func deafProxy(t *testing.T) (streamlane.Config, *atomic.Bool) {
	t.Helper()
	quiet := &atomic.Bool{}
	p, err := faultproxy.ListenTap(streamAddr(), swallow(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return proxied(t, p), quiet
}

package relay

// The world TestPropertyPipeline's schedules run in: the relay over a
// scripted binlog, stream lanes over streamlanetest's broker, a marker and
// a checkpoint store that remember what they were given, and the checks.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/streamlane"
	"github.com/binlog-relay/binlog-relay/internal/streamlane/streamlanetest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

var (
	errLeaseLost = errors.New("the lease is lost")
	errCrash     = errors.New("crash")
)

// propWindow and propConfirmTimeout are the stream lanes' window and
// confirm timeout: a small window keeps jobs queued behind it.
const (
	propWindow         = 3
	propConfirmTimeout = 2 * time.Second
)

// propStore keeps every checkpoint saved.
type propStore struct {
	mu  sync.Mutex
	cps []checkpoint.Checkpoint
}

func (s *propStore) Save(_ context.Context, c checkpoint.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cps = append(s.cps, c)
	return nil
}

func (s *propStore) last() (checkpoint.Checkpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cps) == 0 {
		return checkpoint.Checkpoint{}, false
	}
	return s.cps[len(s.cps)-1], true
}

// propMarker keeps the rows marked SENT and sent to the retry path.
type propMarker struct {
	mu          sync.Mutex
	sent, retry []any
}

func (m *propMarker) MarkSent(_ context.Context, _ *outbox.Table, marks rowstatus.Marks) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, marks.IDs...)
	return int64(len(marks.IDs)), nil
}

func (m *propMarker) MarkRetryMany(_ context.Context, _ *outbox.Table, _ rowstatus.Attempt, rows rowstatus.Marks) (rowstatus.Outcome, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retry = append(m.retry, rows.IDs...)
	return rowstatus.Retrying, int64(len(rows.IDs)), nil
}

func (m *propMarker) marked() (sent, retry []any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.sent), slices.Clone(m.retry)
}

// propReader plays the schedule's transactions after the start position,
// the requeue rows only while the setting makes them events, then waits
// for the stop as a live stream does.
type propReader struct{ w *propWorld }

func (p propReader) Run(ctx context.Context, start binlog.Position, out chan<- binlog.Event) error {
	for _, ev := range p.w.events(start.Pos) {
		select {
		case out <- ev:
		case <-ctx.Done():
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

func (propReader) Connected() bool { return true }

// propWorld is one schedule's run.
type propWorld struct {
	s                  schedule
	broker             *streamlanetest.Broker
	names              []string
	status, statusless *outbox.Table
	rt                 *router.Router
	store              *propStore
	marker             *propMarker

	requeues  bool // the setting the running relay was built with
	leaseLost atomic.Bool

	r       *Relay
	cancel  context.CancelFunc
	done    chan error
	running bool
	// confirmed counts the running Run's confirmed rows of the status
	// table (its Observer): the model of Unmarked. unmarkedErr is the
	// first Run that ended with Unmarked above 0.
	confirmed   *atomic.Int64
	unmarkedErr error

	// epoch counts the Runs that could not resume a checkpoint's
	// publishing ids (they start above the broker's): within one epoch a
	// row keeps its publishing id.
	epoch int
	ids   map[string]int64 // message id -> publishing id, this epoch
	// sendsSeen counts the sends checkIDs took; idErr is its first
	// violation.
	sendsSeen int
	idErr     error
	// msgRow is each message id's row.
	msgRow map[string]propRow
	rowMsg map[int]string
}

func newPropWorld(t *testing.T, s schedule) *propWorld {
	status := presetTable(t, "producer-message", "routing_key")
	statusless := presetTable(t, "debezium", "")
	rt, err := router.New([]*outbox.Table{status, statusless}, router.WithAppID("relay-test"))
	if err != nil {
		t.Fatal(err)
	}
	w := &propWorld{s: s, broker: streamlanetest.NewBroker(), status: status, statusless: statusless, rt: rt,
		store: &propStore{}, marker: &propMarker{}, requeues: s.requeues, msgRow: map[string]propRow{}, rowMsg: map[int]string{}}
	for i := range s.lanes {
		w.names = append(w.names, streamlane.ProducerName("relay", i, s.lanes))
	}
	for _, x := range s.txs {
		for _, r := range x.rows {
			msg, err := rt.Route(w.row(r))
			if err != nil {
				t.Fatal(err)
			}
			w.msgRow[msg.Publishing.MessageId] = r
			w.rowMsg[r.id] = msg.Publishing.MessageId
		}
	}
	return w
}

// row is a fresh outbox row for r (the pipeline drops a routed row's
// payload, so each Run reads its own).
func (w *propWorld) row(r propRow) *outbox.Row {
	if r.statusless {
		return &outbox.Row{Table: w.statusless, ID: r.id, Values: map[string]any{"id": r.id, "aggregatetype": "orders",
			"aggregateid": r.key, "type": "created", "payload": []byte(`{}`)}}
	}
	return markedRow(w.status, r.id, 0, r.key)
}

func (w *propWorld) events(after uint32) []binlog.Event {
	var evs []binlog.Event
	for _, x := range w.s.txs {
		if x.pos <= after {
			continue
		}
		for _, r := range x.rows {
			if r.requeue && !w.requeues {
				continue
			}
			evs = append(evs, binlog.Event{Kind: binlog.KindRow, Row: w.row(r)})
		}
		evs = append(evs, binlog.Event{Kind: binlog.KindCommit, Commit: binlog.Commit{File: "bin.000001", Pos: x.pos, OpenXA: x.openXA}})
	}
	return evs
}

func (w *propWorld) guard() error {
	if w.leaseLost.Load() {
		return errLeaseLost
	}
	return nil
}

// start builds a relay and runs it from the last checkpoint, as the app
// does after a failure or a restart.
func (w *propWorld) start(t *testing.T) {
	lanes := make([]Lane, len(w.names))
	for i, name := range w.names {
		l, err := streamlane.NewWith[Ticket](streamlane.Config{Stream: "events", ProducerName: name, Window: propWindow,
			ConfirmTimeout: propConfirmTimeout}, w.broker.Dial(name), zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		lanes[i] = streamlane.Restarting[Ticket]{Lane: l}
	}
	scope := w.propScope(w.requeues)
	w.confirmed = &atomic.Int64{}
	r := mustNew(t, Config{FlushInterval: 10 * time.Millisecond, CheckpointInterval: 20 * time.Millisecond, Buffer: 4,
		DrainTimeout: time.Second, Server: func() string { return "test" }, SeqScope: scope, Guard: w.guard,
		Observer: &confirmCounter{t: w.status, n: w.confirmed}},
		propReader{w}, w.rt, lanes, w.marker, w.store, zap.NewNop())
	start := binlog.Position{Flavor: binlog.FlavorMariaDB, File: "bin.000001", Pos: 4}
	cp, ok := w.store.last()
	if ok {
		r.ResumeFrom(cp)
		start = cp.Position()
	}
	if !ok || cp.SeqScope != scope {
		// The sends so far belong to the numbering that ends here.
		if err := w.checkIDs(); err != nil && w.idErr == nil {
			w.idErr = err
		}
		w.epoch++
		w.ids = map[string]int64{}
	}
	for _, name := range w.names {
		r.RaiseSeqFloor(uint64(w.broker.LastID(name)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.r, w.cancel, w.done, w.running = r, cancel, make(chan error, 1), true
	go func() { w.done <- r.Run(ctx, start) }()
}

// stop ends the Run, gracefully or as a crash, and returns its error.
func (w *propWorld) stop(graceful bool) error {
	if !w.running {
		return nil
	}
	w.running = false
	if graceful {
		w.cancel()
	} else {
		w.r.Abort(errCrash)
	}
	err := <-w.done
	w.cancel()
	w.noteUnmarked()
	return err
}

// noteUnmarked records a Run that ended with rows still counted unmarked:
// nothing of it is pending in this process any more (the next Run
// replays them).
func (w *propWorld) noteUnmarked() {
	if n := w.r.Unmarked(); n != 0 && w.unmarkedErr == nil {
		w.unmarkedErr = fmt.Errorf("a Run ended with Unmarked %d, want 0", n)
	}
}

// confirmCounter is the Observer that counts one table's confirmed rows.
type confirmCounter struct {
	nopObserver
	t *outbox.Table
	n *atomic.Int64
}

func (c *confirmCounter) Published(t *outbox.Table, _ string, _, _ time.Duration) {
	if t == c.t {
		c.n.Add(1)
	}
}

// ended reports a Run that returned by itself, with its error.
func (w *propWorld) ended() (error, bool) {
	select {
	case err := <-w.done:
		w.cancel()
		w.running = false
		w.noteUnmarked()
		return err, true
	default:
		return nil, false
	}
}

// settle lets the pipeline run until every goroutine waits, restarting a
// Run that failed as the app does (a stream lane's failure restarts from
// the checkpoint). Any other error is a violation.
func (w *propWorld) settle(t *testing.T) error {
	for {
		synctest.Wait()
		err, ok := w.ended()
		if !ok {
			return nil
		}
		if !errors.As(err, new(*streamlane.Failure)) {
			return fmt.Errorf("Run returned %v", err)
		}
		w.start(t)
	}
}

func (w *propWorld) producer(lane int) *streamlanetest.Producer {
	return w.broker.Producer(w.names[lane])
}

// do runs one step.
func (w *propWorld) do(t *testing.T, st step) error {
	switch st.kind {
	case stepConfirm:
		if p := w.producer(st.lane); p != nil {
			p.Confirm(st.n, st.reversed)
		}
	case stepRefuse:
		if p := w.producer(st.lane); p != nil {
			p.Refuse()
		}
	case stepCut:
		if p := w.producer(st.lane); p != nil {
			p.StoreSilently(st.n)
			p.Cut("connection lost")
		}
	case stepBlackhole:
		time.Sleep(propConfirmTimeout + time.Second)
	case stepTick:
		time.Sleep(50 * time.Millisecond)
	case stepRestart:
		_ = w.stop(st.graceful) // a drain cut short, a crash: both fine here
		w.requeues = st.requeues
		w.start(t)
	case stepLeaseLost:
		return w.leaseLostStep(t)
	}
	return nil
}

// leaseLostStep: the leader was paused past its lease; when it wakes, the
// broker's answers to what it had sent come in, and it must publish
// nothing more (a new leader publishes from the checkpoint). Then the
// app aborts it and the next leader starts.
func (w *propWorld) leaseLostStep(t *testing.T) error {
	synctest.Wait()
	before := len(w.broker.Sends())
	w.leaseLost.Store(true)
	for range 3 {
		for i := range w.names {
			if p := w.producer(i); p != nil {
				p.Confirm(1<<20, false)
			}
		}
		synctest.Wait()
	}
	after := w.broker.Sends()
	_ = w.stop(false) // the app aborts a relay whose lease is lost
	w.leaseLost.Store(false)
	if len(after) > before {
		return fmt.Errorf("a leader whose lease was lost published %d messages after it (first %s)",
			len(after)-before, after[before].MessageID)
	}
	w.start(t)
	return nil
}

// check is the invariants after a step.
func (w *propWorld) check() error {
	// binlog_relay_unmarked_rows: once every goroutine waits, the running
	// Run's rows confirmed and not yet written are its confirmed rows of
	// the status table less those its marks named (moved to SENT, or found
	// SENT already), whether they wait for a batch, are kept for a later
	// one or were handed over; and a Run that ended counts none.
	if w.unmarkedErr != nil {
		return w.unmarkedErr
	}
	if w.running {
		model := w.confirmed.Load() - w.r.Stats.Marked.Load() - w.r.Stats.AlreadySent.Load()
		if n := w.r.Unmarked(); n != model {
			return fmt.Errorf("Unmarked says %d; %d rows confirmed, %d marked, %d SENT already: want %d",
				n, w.confirmed.Load(), w.r.Stats.Marked.Load(), w.r.Stats.AlreadySent.Load(), model)
		}
	}
	stored := w.broker.Stored()
	isStored := map[string]bool{}
	for _, s := range stored {
		isStored[s.MessageID] = true
	}
	// The saved checkpoint never passes a row without a settled outcome:
	// every row of a transaction at or before it is on the stream (a
	// stream lane fails no row; it fails the lane).
	if cp, ok := w.store.last(); ok {
		// Never at a position with a prepared XA branch open: a restart
		// there would not read its prepare again.
		for _, x := range w.s.txs {
			if x.pos == cp.Pos && x.openXA {
				return fmt.Errorf("checkpoint at %d, inside an open XA branch", cp.Pos)
			}
		}
		for _, x := range w.s.txs {
			if x.pos > cp.Pos {
				break
			}
			for _, r := range x.rows {
				if r.requeue {
					continue // an event or not, by the setting of the Run that read it
				}
				if !isStored[w.rowMsg[r.id]] {
					return fmt.Errorf("checkpoint at %d passes row %d (%s), which is not on the stream", cp.Pos, r.id, w.rowMsg[r.id])
				}
			}
		}
	}
	// A row marked SENT is on the stream.
	sent, retry := w.marker.marked()
	for _, id := range sent {
		if m := w.rowMsg[id.(int)]; !isStored[m] {
			return fmt.Errorf("row %d marked SENT but not on the stream", id)
		}
	}
	if len(retry) > 0 {
		return fmt.Errorf("rows %v sent to the retry path: a stream lane fails no row", retry)
	}
	// Order per key: the first copy of each row on the stream comes in
	// binlog order among its key's rows.
	seen, lastOfKey := map[string]bool{}, map[string]int{}
	for _, s := range stored {
		if seen[s.MessageID] {
			continue
		}
		seen[s.MessageID] = true
		r := w.msgRow[s.MessageID]
		if r.requeue {
			continue // an event only under some settings: a setting changed is no reordering
		}
		key := fmt.Sprintf("%s (statusless %v)", r.key, r.statusless) // a key is a table's
		if r.id < lastOfKey[key] {
			return fmt.Errorf("key %s: row %d stored after row %d", key, r.id, lastOfKey[key])
		}
		lastOfKey[key] = r.id
	}
	// Publishing ids: strictly increasing per producer within a Run, and a
	// row keeps its id on every replay of the same numbering.
	lastSent := map[[2]any]int64{}
	for _, s := range w.broker.Sends() {
		k := [2]any{s.Producer, s.Dial}
		if s.ID <= lastSent[k] {
			return fmt.Errorf("producer %s sent publishing id %d after %d", s.Producer, s.ID, lastSent[k])
		}
		lastSent[k] = s.ID
	}
	return nil
}

// checkIDs checks that a row sent again in the same epoch keeps its
// publishing id, over the sends since the last call.
func (w *propWorld) checkIDs() error {
	sends := w.broker.Sends()
	for _, s := range sends[w.sendsSeen:] {
		if id, ok := w.ids[s.MessageID]; ok && id != s.ID && w.idErr == nil {
			w.idErr = fmt.Errorf("row %s sent with publishing id %d, %d before: replays must keep their ids",
				s.MessageID, s.ID, id)
		}
		w.ids[s.MessageID] = s.ID
	}
	w.sendsSeen = len(sends)
	return w.idErr
}

// heal answers everything until the relay has read, published and saved
// the whole schedule, then checks that every row reached the stream.
func (w *propWorld) heal(t *testing.T) error {
	last := w.s.txs[len(w.s.txs)-1].pos
	for range 400 {
		for i := range w.names {
			if p := w.producer(i); p != nil {
				p.Confirm(1<<20, false)
			}
		}
		time.Sleep(30 * time.Millisecond)
		if err := w.settle(t); err != nil {
			return err
		}
		if err := w.checkIDs(); err != nil {
			return err
		}
		if err := w.check(); err != nil {
			return err
		}
		if cp, ok := w.store.last(); ok && cp.Pos == last {
			break
		}
	}
	isStored := map[string]bool{}
	for _, s := range w.broker.Stored() {
		isStored[s.MessageID] = true
	}
	for _, x := range w.s.txs {
		for _, r := range x.rows {
			if !r.requeue && !isStored[w.rowMsg[r.id]] {
				cp, _ := w.store.last()
				return fmt.Errorf("row %d (%s) never reached the stream (checkpoint at %d)", r.id, w.rowMsg[r.id], cp.Pos)
			}
		}
	}
	return nil
}

// runSchedule runs s in a bubble and returns the first violation.
func runSchedule(t *testing.T, s schedule) error {
	var verr error
	synctest.Test(t, func(t *testing.T) {
		w := newPropWorld(t, s)
		if propDebug {
			fmt.Print("schedule ", s)
		}
		w.start(t)
		if err := w.settle(t); err != nil {
			verr = err
			return
		}
		defer func() { _ = w.stop(false) }()
		for i, st := range s.steps {
			if propDebug {
				fmt.Println("step", i+1, st)
			}
			err := w.do(t, st)
			if err == nil {
				err = w.settle(t)
			}
			if err == nil {
				err = w.checkIDs()
			}
			if err == nil {
				err = w.check()
			}
			if err != nil {
				verr = fmt.Errorf("after step %d (%s): %w", i+1, st, err)
				return
			}
		}
		if err := w.heal(t); err != nil {
			verr = fmt.Errorf("after the schedule, everything answered: %w", err)
		}
		if verr != nil && propDebug {
			for _, s := range w.broker.Sends() {
				fmt.Printf("sent %s dial %d id %d %s\n", s.Producer, s.Dial, s.ID, s.MessageID)
			}
			for _, s := range w.broker.Stored() {
				fmt.Printf("stored %s id %d %s\n", s.Producer, s.ID, s.MessageID)
			}
			cps := w.store.cps
			for _, c := range cps {
				fmt.Printf("checkpoint %d seq %d scope %s\n", c.Pos, c.Seq, c.SeqScope)
			}
		}
	})
	return verr
}

var propDebug = os.Getenv("PROP_DEBUG") != ""

// propScope is the seq_scope the app saves for the schedule's settings
// (internal/app's seqScope): the requeue rows are events under one set of
// publishable statuses and not under the other.
func (w *propWorld) propScope(requeues bool) string {
	status := *w.status
	status.Statuses.Publishable = []string{"PENDING"}
	if requeues {
		status.Statuses.Publishable = []string{"PENDING", "SENDING"}
	}
	tables := []*outbox.Table{&status, w.statusless}
	return streamlane.Scope([]string{status.FullName(), w.statusless.FullName()}, len(w.names), "events",
		binlog.Numbering(binlog.Config{}, tables))
}

package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

func debeziumRow(tb *outbox.Table, id, aggregateType string) *outbox.Row {
	v := map[string]any{"id": id, "aggregateid": "a-1", "type": "order.created", "payload": []byte(`{"n":1}`)}
	if aggregateType != "" {
		v["aggregatetype"] = aggregateType
	}
	return &outbox.Row{Table: tb, ID: id, Values: v}
}

// runRoute feeds events through route and returns the jobs it sent.
func runRoute(t *testing.T, r *Relay, stop context.Context, evs ...binlog.Event) ([]publisher.Job[Ticket], error) {
	t.Helper()
	events := make(chan binlog.Event, len(evs))
	for _, ev := range evs {
		events <- ev
	}
	close(events)
	jobs := make(chan publisher.Job[Ticket], len(evs))
	err := r.route(context.Background(), stop, events, jobs, 0, 0)
	close(jobs)
	var out []publisher.Job[Ticket]
	for j := range jobs {
		out = append(out, j)
	}
	return out, err
}

// Rows of a table without a status column go to the publisher as
// must-deliver; a routed row's job holds its weight of the budget.
func TestStatuslessRowsAreMustDeliver(t *testing.T) {
	tb := debeziumTable(t)
	r, _ := testRelay(t, tb, "")
	jobs, err := runRoute(t, r, context.Background(), binlog.Event{Kind: binlog.KindRow, Row: debeziumRow(tb, "e-1", "orders")},
		binlog.Event{Kind: binlog.KindCommit})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].Msg == nil || !jobs[0].MustDeliver || jobs[0].Msg.Exchange != "orders" {
		t.Fatalf("jobs %+v, want the row must-deliver to orders, then its commit", jobs)
	}
	tag := jobs[0].Tag.(*inflightRow)
	if tag.weight < rowOverhead {
		t.Fatalf("the row holds %d bytes of the budget", tag.weight)
	}
	if _, kept := tag.row.Values["payload"]; kept {
		t.Fatal("the row keeps its payload beside the message body: it would be held twice")
	}
}

// A status-less row that cannot be routed goes to the dead-letter exchange,
// with the reason and its table in headers, when one is configured.
func TestStatuslessUnroutableRowGoesToDeadLetterExchange(t *testing.T) {
	tb := debeziumTable(t)
	r, _ := testRelay(t, tb, "relay.dlx")
	jobs, err := runRoute(t, r, context.Background(), binlog.Event{Kind: binlog.KindRow, Row: debeziumRow(tb, "e-2", "")})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Msg == nil {
		t.Fatalf("jobs %+v, want one message", jobs)
	}
	m := jobs[0].Msg
	reason, _ := m.Publishing.Headers[HeaderReason].(string)
	if m.Exchange != "relay.dlx" || !jobs[0].MustDeliver || m.Publishing.MessageId != "e-2" || string(m.Publishing.Body) != `{"n":1}` ||
		!strings.Contains(reason, "aggregatetype") || m.Publishing.Headers[HeaderTable] != "shop.outbox" {
		t.Fatalf("dead-letter message %s/%s id %q body %q headers %v", m.Exchange, m.RoutingKey, m.Publishing.MessageId, m.Publishing.Body, m.Publishing.Headers)
	}

	// Settling it counts a dead-lettered row, not a published or failed one,
	// and gives its budget back.
	s := &committer{r: r, stop: context.Background(), pending: map[*outbox.Table]*rowstatus.Marks{}, batches: make(chan batch, 4)}
	if err := s.handle(context.Background(), publisher.Result[Ticket]{Job: jobs[0]}); err != nil {
		t.Fatal(err)
	}
	if r.Stats.DeadLettered.Load() != 1 || r.Stats.Published.Load() != 0 || r.Stats.Failed.Load() != 0 || s.count != 0 {
		t.Fatalf("dead-lettered %d published %d failed %d pending marks %d; want 1 0 0 0",
			r.Stats.DeadLettered.Load(), r.Stats.Published.Load(), r.Stats.Failed.Load(), s.count)
	}
	if !r.budget.sem.TryAcquire(r.budget.total) {
		t.Fatal("the settled row did not give its budget back")
	}
}

// Without a dead-letter exchange the stream holds behind such a row: no
// job for it or anything after it, a hold readiness can name, and the
// route stage ends on the stop (the checkpoint stays before the row).
func TestStatuslessUnroutableRowHoldsWithoutDeadLetterExchange(t *testing.T) {
	tb := debeziumTable(t)
	r, logs := testRelay(t, tb, "")
	stop, cancel := context.WithCancel(context.Background())
	type result struct {
		jobs []publisher.Job[Ticket]
		err  error
	}
	done := make(chan result, 1)
	go func() {
		jobs, err := runRoute(t, r, stop, binlog.Event{Kind: binlog.KindRow, Row: debeziumRow(tb, "e-1", "orders")},
			binlog.Event{Kind: binlog.KindRow, Row: debeziumRow(tb, "e-2", "")},
			binlog.Event{Kind: binlog.KindRow, Row: debeziumRow(tb, "e-3", "orders")})
		done <- result{jobs, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := r.Holding(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no hold reported for an unroutable row of a status-less table")
		}
		time.Sleep(5 * time.Millisecond)
	}
	h, _ := r.Holding()
	if h.MessageID != "e-2" || !strings.Contains(h.Reason, "aggregatetype") {
		t.Fatalf("hold %+v, want message e-2 and the route's reason", h)
	}
	if why := HoldReason(h, h.Since.Add(90*time.Second)); !strings.Contains(why, `"e-2"`) || !strings.Contains(why, "1m30s") {
		t.Fatalf("readiness reason %q does not name the message and the time", why)
	}
	select {
	case res := <-done:
		t.Fatalf("route went on past the held row: %+v", res)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	var res result
	select {
	case res = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the hold did not end on the stop")
	}
	if res.err != nil || len(res.jobs) != 1 || res.jobs[0].Msg.Publishing.MessageId != "e-1" {
		t.Fatalf("route returned %v with %d jobs; want only e-1, the row before the hold", res.err, len(res.jobs))
	}
	if logs.FilterMessageSnippet("cannot be routed").Len() != 1 {
		t.Fatalf("log: %v", logs.All())
	}
}

// A failed result for a status-less row (which the publisher never reports
// for a must-deliver message) is not skipped: the committer holds, and after
// the stop applies no later commit.
func TestStatuslessFailedResultHoldsTheSettler(t *testing.T) {
	tb := debeziumTable(t)
	r, _ := testRelay(t, tb, "")
	stop, cancel := context.WithCancel(context.Background())
	s := &committer{r: r, stop: stop, pending: map[*outbox.Table]*rowstatus.Marks{}, batches: make(chan batch, 4)}
	row := debeziumRow(tb, "e-9", "orders")
	w, _ := r.budget.acquire(context.Background(), 100)
	res := publisher.Result[Ticket]{Job: publisher.Job[Ticket]{Msg: &router.Message{Exchange: "orders"}, Tag: &inflightRow{row: row, weight: w}, MustDeliver: true},
		Err: fmt.Errorf("%w: %q (404 NOT_FOUND)", publisher.ErrNoExchange, "orders")}
	done := make(chan error, 1)
	go func() { done <- s.handle(context.Background(), res) }()
	select {
	case err := <-done:
		t.Fatalf("the committer went past a failed status-less row (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	if h, ok := r.Holding(); !ok || h.MessageID != "e-9" || h.Exchange != "orders" || !errors.Is(res.Err, publisher.ErrNoExchange) {
		t.Fatalf("hold %+v %v", h, ok)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Later commits are not applied (the tracker is nil here: applying one
	// would panic).
	if err := s.handle(context.Background(), publisher.Result[Ticket]{Job: publisher.Job[Ticket]{Tag: commitTicket{}}}); err != nil || s.advanced {
		t.Fatalf("a commit after the hold was applied: %v", err)
	}
}

package integration

// Where a replay sends its messages and which rows it takes: one routing
// key for every message (--routing-key with --exchange), a window closed
// by --until, and the original destinations (no --exchange), where each
// replayed message must be the relay's original delivery again, headers
// and properties included, plus the replay's two headers.

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/replay"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// --since and --until select rows by created_at in [since, until): of 2,000
// SENT rows, the 1,200 created three hours ago are replayed and the 800
// created an hour ago are not; with --exchange and --routing-key every one
// arrives on the side exchange under that key. The replica gets one read
// per chunk and a few statements more; the primary none.
func TestReplayRoutingKeyAndUntil(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, relay name and proxies
	const rows, old, chunk, key = 2000, 1200, 100, "replay.inventory"
	s := newReplaySetup(t, nil, "schema/producer_message.sql")
	insertSent(t, s.db, "producer_message", "ru", 0, rows)
	// update_time set to itself keeps its ON UPDATE from firing: the rows
	// stay first sent 50 minutes ago.
	s.db.Exec(t, "UPDATE producer_message SET create_time = create_time - INTERVAL 2 HOUR, update_time = update_time WHERE id <= ?", old)
	s.db.WaitReplicated(t, 60*time.Second)

	code, out, errOut := s.run(t, "--since", "4h", "--until", "2h", "--exchange", s.br.Exchange, "--routing-key", key,
		"--rate", "0", "--chunk-size", fmt.Sprint(chunk))
	if code != 0 {
		t.Fatalf("replay exit %d\nstdout %s\nstderr %s", code, out, tailOf(errOut, 2000))
	}
	_, got := s.checkDelivered(t, msgIDs("ru", 1, old))
	for _, d := range got {
		if d.Exchange != s.br.Exchange || d.RoutingKey != key {
			t.Fatalf("message %s arrived from %s with routing key %q, want %s and %q", d.MessageID, d.Exchange, d.RoutingKey, s.br.Exchange, key)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("published %d, failed 0, of %d rows", old, old)) ||
		!strings.Contains(out, "to exchange "+s.br.Exchange+", routing key "+key) {
		t.Errorf("summary:\n%s", out)
	}
	s.checkPrimaryUntouched(t)
	s.checkReplicaLoad(t, old, chunk)
}

// replayedHeaders are the headers a replay adds to a message.
var replayedHeaders = []string{replay.HeaderReplay, replay.HeaderOriginalPublished}

// A replay without --exchange sends each row where the relay sent it the
// first time, and each replayed message is the original delivery again:
// the same exchange, routing key, message id, body, AMQP properties
// (content type, app id, delivery mode...) and mapped headers (a header
// column, the trace context), with only the replay's two headers added.
func TestReplayToOriginalDestinations(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, relay name and proxies
	const rows = 300
	s := newReplaySetup(t, func(schema string) string {
		return fmt.Sprintf("  - {preset: producer-message, schema: %s, columns: {headers: [tenant]}, trace: {format: traceparent}, route: {content_type: application/vnd.shop.order+json}}\n", schema)
	}, "schema/producer_message.sql")
	s.db.Exec(t, "ALTER TABLE producer_message ADD COLUMN tenant VARCHAR(32) NULL, ADD COLUMN traceparent VARCHAR(64) NULL")
	s.db.WaitReplicated(t, 30*time.Second) // the relay reads the columns on the replica

	// The relay publishes the rows first, under the replay's relay name
	// (its app id), straight to the servers.
	r := relaytest.StartRelay(t, relaytest.Config{Name: s.name, Tables: s.tables, Sections: map[string]string{"http": `{addr: "off"}`}}.YAML())
	s.sentFrom = time.Now().Add(-time.Second)
	var want []string
	var values []string
	for i := 1; i <= rows; i++ {
		id := fmt.Sprintf("ro-%d", i)
		want = append(want, id)
		tenant, trace := fmt.Sprintf("'tenant-%d'", i%3), "NULL"
		if i%5 == 0 {
			tenant = "NULL" // no header
		}
		if i%2 == 0 {
			trace = fmt.Sprintf("'00-%032x-%016x-01'", i, i)
		}
		values = append(values, fmt.Sprintf("('%s', '%s', '%s', '{\"n\":%d}', %s, %s)", id, s.br.Exchange,
			[]string{"order.created", "order.paid"}[i%2], i, tenant, trace))
	}
	s.db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content, tenant, traceparent) VALUES "+strings.Join(values, ","))
	waitDeliveredOnceInOrder(t, s.got, want, 60*time.Second)
	testenv.Eventually(t, 30*time.Second, func() bool { return statusCounts(t, s.db.Primary)["SENT"] == rows },
		"statuses: %v", statusCounts(t, s.db.Primary))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	s.sentTo = time.Now().Add(time.Second)
	s.db.WaitReplicated(t, 30*time.Second)
	originals := s.delivered(t)
	if len(originals) != rows {
		t.Fatalf("the relay delivered %d messages, want %d once each", len(originals), rows)
	}
	checkMapped(t, s.name, originals)

	code, out, errOut := s.run(t, "--rate", "0")
	if code != 0 {
		t.Fatalf("replay exit %d\nstdout %s\nstderr %s", code, out, tailOf(errOut, 2000))
	}
	if !strings.Contains(out, "to original exchanges and routing keys") || !strings.Contains(out, fmt.Sprintf("published %d, failed 0", rows)) {
		t.Errorf("summary:\n%s", out)
	}
	_, replayed := s.checkDelivered(t, want)
	var differ []string
	for i, d := range replayed {
		if diff := sameDelivery(originals[i], d); diff != "" {
			differ = append(differ, d.MessageID+": "+diff)
		}
	}
	if len(differ) > 0 {
		t.Errorf("%d of %d replayed messages differ from their original delivery, the first %s", len(differ), rows, differ[0])
	}
	s.checkPrimaryUntouched(t)
}

// checkMapped asserts the originals carry what the mapping gives them, so
// that comparing a replay with them compares something: the content type
// and app id set, the tenant header where the column is not NULL, the
// trace context where the row has one, and no replay header.
func checkMapped(t *testing.T, appID string, originals []testenv.Delivery) {
	t.Helper()
	var tenants, traces int
	for _, d := range originals {
		if d.ContentType != "application/vnd.shop.order+json" || d.AppID != appID || d.DeliveryMode != 2 {
			t.Fatalf("original %s: content type %q, app id %q, delivery mode %d", d.MessageID, d.ContentType, d.AppID, d.DeliveryMode)
		}
		if _, ok := d.Headers["tenant"]; ok {
			tenants++
		}
		if _, ok := d.Headers["traceparent"]; ok {
			traces++
		}
		for _, h := range replayedHeaders {
			if _, ok := d.Headers[h]; ok {
				t.Fatalf("original %s carries %s", d.MessageID, h)
			}
		}
	}
	if tenants != len(originals)*4/5 || traces != len(originals)/2 {
		t.Fatalf("of %d originals %d carry the tenant header (want %d) and %d a traceparent (want %d)",
			len(originals), tenants, len(originals)*4/5, traces, len(originals)/2)
	}
}

// sameDelivery says how a replayed message differs from the original
// delivery of its row ("" when only the replay's headers and the
// timestamp, the time of the publish, do).
func sameDelivery(o, r testenv.Delivery) string {
	var diffs []string
	for _, f := range []struct{ name, o, r string }{
		{"exchange", o.Exchange, r.Exchange}, {"routing key", o.RoutingKey, r.RoutingKey}, {"message id", o.MessageID, r.MessageID},
		{"body", string(o.Body), string(r.Body)}, {"content type", o.ContentType, r.ContentType},
		{"content encoding", o.ContentEncoding, r.ContentEncoding}, {"app id", o.AppID, r.AppID}, {"type", o.Type, r.Type},
		{"correlation id", o.CorrelationID, r.CorrelationID}, {"user id", o.UserID, r.UserID}, {"expiration", o.Expiration, r.Expiration},
		{"delivery mode", fmt.Sprint(o.DeliveryMode), fmt.Sprint(r.DeliveryMode)}, {"priority", fmt.Sprint(o.Priority), fmt.Sprint(r.Priority)},
	} {
		if f.o != f.r {
			diffs = append(diffs, fmt.Sprintf("%s %q, was %q", f.name, f.r, f.o))
		}
	}
	h, oh := map[string]any(maps.Clone(r.Headers)), map[string]any(o.Headers)
	for _, k := range replayedHeaders {
		delete(h, k)
	}
	if (len(h) != 0 || len(oh) != 0) && !reflect.DeepEqual(h, oh) {
		diffs = append(diffs, fmt.Sprintf("headers %v, were %v", h, oh))
	}
	return strings.Join(diffs, "; ")
}

package integration

// Poison rows: one row the broker refuses, or that breaks an AMQP limit, must
// settle on its own (retried or FAILED with the reason) while every good row
// behind it flows, without a reconnect loop. Tables without a status column
// never skip such a row: it goes to the dead-letter exchange, or the stream
// holds behind it (and says so) until it can be delivered.

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// management sends one request to the management API.
func management(t *testing.T, method, path string, body any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	u, err := url.Parse(testenv.ManagementURL)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	req, err := http.NewRequest(method, u.Scheme+"://"+u.Host+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(u.User.Username(), pw)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("management API %s %s: %v", method, path, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 && !(method == http.MethodDelete && resp.StatusCode == http.StatusNotFound) {
		t.Fatalf("management API %s %s: %s", method, path, resp.Status)
	}
}

// restrictedUser creates a RabbitMQ user that may configure and read
// everything but write only to exchanges whose names match write; it is
// deleted when the test ends. It returns the AMQP URL for it through addr.
func restrictedUser(t *testing.T, addr, write string) string {
	t.Helper()
	name, pw := testenv.UniqueName("relay_user"), testenv.UniqueName("pw")
	management(t, http.MethodPut, "/api/users/"+name, map[string]string{"password": pw, "tags": ""})
	t.Cleanup(func() { management(t, http.MethodDelete, "/api/users/"+name, nil) })
	management(t, http.MethodPut, "/api/permissions/%2F/"+name, map[string]string{"configure": ".*", "read": ".*", "write": write})
	return fmt.Sprintf("amqp://%s:%s@%s/", name, pw, addr)
}

// declareExchange declares a topic exchange as guest, deleted at the end.
func declareExchange(t *testing.T, name string) {
	t.Helper()
	conn, err := amqp.Dial(testenv.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("declaring %s: %v", name, err)
	}
	t.Cleanup(func() {
		if c, err := amqp.Dial(testenv.AMQPURL); err == nil {
			if ch, err := c.Channel(); err == nil {
				_ = ch.ExchangeDelete(name, false, false)
			}
			_ = c.Close()
		}
	})
}

type poisonRow struct {
	kind       string
	messageID  string
	exchange   string
	routingKey string
	content    string
	headers    any    // the headers JSON column; nil is NULL
	want       string // what the error column must name (any of, separated by |)
}

// The poison-row test: one row of each kind, each followed by 1,000 good
// rows. Every good row arrives once, in commit order; every poison row ends
// PENDING (retried) or FAILED with the reason in error_msg; the relay opens
// at most 10 broker connections over the whole run; the stop drains within
// relay.drain_timeout.
func TestPoisonRowsSettleAndTheStreamFlows(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	// Room for names over AMQP's 255-byte limit, and a headers JSON column
	// expanded into AMQP headers.
	db.Exec(t, "ALTER TABLE producer_message MODIFY message_id VARCHAR(400) NOT NULL, ADD COLUMN hdrs JSON NULL")
	db.WaitReplicated(t, 30*time.Second) // the relay reads the table on the replica
	br, got := testenv.NewCollectedBroker(t)
	unbound := testenv.NewExchange(t)
	denied := testenv.UniqueName("deny")
	declareExchange(t, denied)

	// The relay reaches RabbitMQ through a proxy that counts its dials, as
	// a user that may not write to the "deny" exchange.
	proxy := testenv.Proxy(t, testenv.AMQPAddr(t))
	brokerURL := restrictedUser(t, proxy.Addr(), `^(ex_|no_such|amq\.).*`)

	const bodyLimit = 1 << 20
	poison := []poisonRow{
		{kind: "internal exchange", exchange: "amq.rabbitmq.trace", routingKey: "k", want: "403|ACCESS_REFUSED"},
		{kind: "no write permission", exchange: denied, routingKey: "k", want: "403|ACCESS_REFUSED"},
		{kind: "missing exchange", exchange: testenv.UniqueName("no_such_exchange"), routingKey: "k", want: "does not exist|404"},
		{kind: "unroutable", exchange: unbound, routingKey: "k", want: "NO_ROUTE"},
		{kind: "300-byte routing key", exchange: br.Exchange, routingKey: strings.Repeat("€", 100), want: "routing key"},
		{kind: "300-byte exchange", exchange: strings.Repeat("é", 150), routingKey: "k", want: "exchange"},
		{kind: "300-byte message id", messageID: "m-" + strings.Repeat("x", 298), exchange: br.Exchange, routingKey: "k", want: "message id|message-id|message_id"},
		{kind: "headers over frame_max", exchange: br.Exchange, routingKey: "k", headers: map[string]string{"big": strings.Repeat("h", 200<<10)}, want: "frame_max|header"},
		{kind: "body over max_message_bytes", exchange: br.Exchange, routingKey: "k", content: strings.Repeat("b", bodyLimit+1), want: "too large"},
		{kind: "header type the broker rejects", exchange: br.Exchange, routingKey: "k", headers: map[string]string{"CC": "not-a-list"}, want: "406|PRECONDITION_FAILED"},
	}
	const drainTimeout = 10 * time.Second
	tables := fmt.Sprintf("  - preset: producer-message\n    schema: %s\n    columns: {headers: [hdrs]}\n    route: {expand_headers: true}\n", db.Name)
	r := relaytest.StartRelay(t, opsYAML(testenv.UniqueName("poison"), tables, map[string]string{
		"broker": fmt.Sprintf("{url: %q, max_message_bytes: %d}", brokerURL, bodyLimit),
		// Retries far in the future: each poison row is tried once here.
		"retry": "{base: 1h, max: 2h}",
		"relay": fmt.Sprintf("{flush_interval: 50ms, drain_timeout: %s}", drainTimeout),
	}))

	var want []string
	for i := range poison {
		p := &poison[i]
		if p.messageID == "" {
			p.messageID = fmt.Sprintf("poison-%02d", i)
		}
		if p.content == "" {
			p.content = `{"poison":true}`
		}
		var hdrs sql.NullString
		if p.headers != nil {
			b, _ := json.Marshal(p.headers)
			hdrs = sql.NullString{String: string(b), Valid: true}
		}
		db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content, hdrs) VALUES (?, ?, ?, ?, ?)",
			p.messageID, p.exchange, p.routingKey, p.content, hdrs)
		stmt, ids := orderInsert(br.Exchange, fmt.Sprintf("good%02d", i), i, 1000)
		db.Exec(t, stmt)
		want = append(want, ids...)
	}

	// A fence row after everything: the relay publishes in commit order on
	// one channel into one queue, so once the fence has arrived every copy
	// of an earlier row that was ever published has arrived before it.
	fenceStmt, fence := orderInsert(br.Exchange, "fence", 0, 1)
	db.Exec(t, fenceStmt)
	want = append(want, fence...)
	testenv.Eventually(t, 3*time.Minute, func() bool {
		all := got.All()
		return len(all) > 0 && all[len(all)-1].MessageID == fence[0]
	}, "the fence row has not arrived: received %d of %d good rows", got.Len(), len(want))
	msgs := got.All()
	if len(msgs) != len(want) {
		t.Fatalf("received %d messages, want exactly %d (each good row once, no poison row); repeated: %s",
			len(msgs), len(want), repeated(msgs))
	}
	for i, m := range msgs {
		if m.MessageID != want[i] {
			t.Fatalf("message %d is %.60s, want %s (commit order broken, or a poison row delivered)", i, m.MessageID, want[i])
		}
	}

	for _, p := range poison {
		var status string
		var retries int
		var errMsg sql.NullString
		testenv.Eventually(t, 20*time.Second, func() bool {
			if err := db.Primary.QueryRow("SELECT status, retry_count, error_msg FROM producer_message WHERE message_id = ?", p.messageID).
				Scan(&status, &retries, &errMsg); err != nil {
				t.Fatal(err)
			}
			return status == "FAILED" || (status == "PENDING" && retries >= 1)
		}, "%s: row is %s with %d retries, want PENDING with a retry or FAILED", p.kind, status, retries)
		named := false
		for _, w := range strings.Split(p.want, "|") {
			named = named || strings.Contains(strings.ToLower(errMsg.String), strings.ToLower(w))
		}
		if !named {
			t.Errorf("%s: error_msg %q does not name the reason (want one of %q)", p.kind, errMsg.String, p.want)
		}
		t.Logf("%s: %s, retry %d: %s", p.kind, status, retries, errMsg.String)
	}
	sent := db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT'")
	testenv.Eventually(t, 20*time.Second, func() bool {
		sent = db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT'")
		return sent == len(want)
	}, "%d rows SENT, want the %d good ones", sent, len(want))

	// The refusals here are all foreseeable: none may have cost a
	// message of unknown fate.
	fams, _ := scrape(t, httpAddr(t, r.App))
	if v, ok := value(fams, "binlog_relay_republished_total"); !ok || v != 0 {
		t.Errorf("binlog_relay_republished_total = %v (present %v), want 0", v, ok)
	}
	if n := proxy.Accepted(); n > 10 {
		t.Fatalf("the relay opened %d broker connections, want at most 10 (a refusal must not reconnect)", n)
	} else {
		t.Logf("broker connections opened: %d", n)
	}
	stopped := time.Now()
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if d := time.Since(stopped); d > drainTimeout {
		t.Fatalf("the stop took %s, over relay.drain_timeout %s", d, drainTimeout)
	}
}

// repeated lists the message ids that arrived more than once, grouped by
// the batch they belong to (good<N> follows poison row N), so a failure
// says which refusal duplicated what.
func repeated(msgs []testenv.Delivery) string {
	seen := map[string]int{}
	byBatch := map[string]int{}
	var batches []string
	for _, m := range msgs {
		seen[m.MessageID]++
		if seen[m.MessageID] == 2 {
			b, _, _ := strings.Cut(m.MessageID, "-")
			if byBatch[b] == 0 {
				batches = append(batches, b)
			}
			byBatch[b]++
		}
	}
	var out []string
	for _, b := range batches {
		out = append(out, fmt.Sprintf("%s: %d", b, byBatch[b]))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// debeziumID is a 36-character id for the debezium outbox (CHAR(36)).
func debeziumID(prefix string, i int) string {
	return fmt.Sprintf("%-8.8s-0000-0000-0000-%012d", prefix+"--------", i)
}

// debeziumInsert commits one outbox row in a transaction of its own.
func debeziumInsert(t *testing.T, db *testenv.DB, id, aggregateType string) {
	t.Helper()
	db.Exec(t, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, ?, 'a-1', 'Happened', ?)",
		id, aggregateType, fmt.Sprintf(`{"id":%q}`, id))
}

func debeziumTables(db string) string {
	return fmt.Sprintf("  - {preset: debezium, schema: %s}\n", db)
}

func messageIDs(ds []testenv.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageID
	}
	return out
}

// headerNaming reports whether some string header of d contains one of the
// words.
func headerNaming(d testenv.Delivery, words ...string) bool {
	for _, v := range d.Headers {
		s, ok := v.(string)
		if !ok {
			continue
		}
		for _, w := range words {
			if strings.Contains(s, w) {
				return true
			}
		}
	}
	return false
}

// readyzBody returns /readyz's status and body.
func readyzBody(t *testing.T, base string) (int, string) {
	t.Helper()
	code, body, err := get(base + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	return code, body
}

// readyzNaming waits until /readyz answers 503 with every one of words in
// its body, and fails with the last body it saw. Not ready for another
// reason first (a replica lagging under load) is fine: what must come is
// the reason the test is about.
func readyzNaming(t *testing.T, base string, within time.Duration, words ...string) {
	t.Helper()
	var code int
	var body string
	testenv.Eventually(t, within, func() bool {
		code, body = readyzBody(t, base)
		if code != http.StatusServiceUnavailable {
			return false
		}
		for _, w := range words {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	}, "/readyz does not name %q; last answer %v", words, lastAnswer(func() string { return fmt.Sprint(code, " ", body) }))
}

// lastAnswer prints what its function returns when the message is made,
// not when the wait began.
type lastAnswer func() string

func (l lastAnswer) String() string { return l() }

// A debezium row that cannot be routed (empty aggregatetype) goes to the
// dead-letter exchange with the reason in a header; the rows around it go
// to their exchange in order, and the dead-letter counter says so.
func TestDebeziumUnroutableRowGoesToDeadLetterExchange(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/debezium_outbox.sql")
	br, got := testenv.NewCollectedBroker(t)
	dl, dead := testenv.NewCollectedBroker(t)
	r := relaytest.StartRelay(t, opsYAML(testenv.UniqueName("dbz-dlx"), debeziumTables(db.Name), map[string]string{
		"broker": fmt.Sprintf("{url: %q, dead_letter_exchange: %s}", testenv.AMQPURL, dl.Exchange)}))

	good, bad := insertUnroutableBetween(t, db, br.Exchange)

	msgs := dropinWait(t, got, len(good), 30*time.Second)
	if fmt.Sprint(messageIDs(msgs)) != fmt.Sprint(good) {
		t.Fatalf("delivered %v, want %v", messageIDs(msgs), good)
	}
	dlq := dropinWait(t, dead, 1, 10*time.Second)
	if dlq[0].MessageID != bad || !headerNaming(dlq[0], "exchange is empty") || string(dlq[0].Body) != asStored(t, db, "outbox", "id", bad, fmt.Sprintf(`{"id":%q}`, bad)) {
		t.Fatalf("dead-lettered %s body %q headers %v; want %s with the reason", dlq[0].MessageID, dlq[0].Body, dlq[0].Headers, bad)
	}
	fams, _ := scrape(t, httpAddr(t, r.App))
	if v, _ := value(fams, "binlog_relay_dead_lettered_total", "table", db.Name+".outbox"); v != 1 {
		t.Fatalf("binlog_relay_dead_lettered_total = %v, want 1", v)
	}
}

// insertUnroutableBetween inserts debezium rows good-1 to exchange, then
// one with no exchange (unroutable), then good-2 and good-3, and returns the
// good ids in commit order and the bad one.
func insertUnroutableBetween(t *testing.T, db *testenv.DB, exchange string) (good []string, bad string) {
	t.Helper()
	good = []string{debeziumID("good", 1), debeziumID("good", 2), debeziumID("good", 3)}
	bad = debeziumID("noroute", 1)
	debeziumInsert(t, db, good[0], exchange)
	debeziumInsert(t, db, bad, "")
	debeziumInsert(t, db, good[1], exchange)
	debeziumInsert(t, db, good[2], exchange)
	return good, bad
}

// Without a dead-letter exchange a debezium row that cannot be routed holds
// the stream: /readyz names it, the hold gauge grows, nothing behind it is
// published and the checkpoint stays before it. Restarted with a
// dead-letter exchange, the relay sends it there and the rows behind it
// follow: it was never skipped.
func TestDebeziumUnroutableRowHoldsUntilRestart(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, names and proxies; no server restarted (main_test.go)
	db := testenv.NewDB(t, "schema/debezium_outbox.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("dbz-hold")
	const drainTimeout = 10 * time.Second
	relaySection := fmt.Sprintf("{flush_interval: 50ms, drain_timeout: %s}", drainTimeout)
	r := relaytest.StartRelay(t, opsYAML(name, debeziumTables(db.Name), map[string]string{"relay": relaySection}))
	base := httpAddr(t, r.App)

	good, bad := insertUnroutableBetween(t, db, br.Exchange)

	readyzNaming(t, base, 30*time.Second, bad, "exchange is empty")
	fams, _ := scrape(t, base)
	if v, ok := value(fams, "binlog_relay_publish_held_seconds"); !ok || v < 5 {
		t.Fatalf("binlog_relay_publish_held_seconds = %v (present %v), want over the 5 s grace", v, ok)
	}
	// The relay has held for over 5 s: rows behind the held one would have
	// arrived by now.
	if ids := messageIDs(got.All()); fmt.Sprint(ids) != fmt.Sprint(good[:1]) {
		t.Fatalf("delivered %v while holding, want only %v", ids, good[:1])
	}
	stopped := time.Now()
	if err := r.Stop(); err != nil {
		t.Fatalf("stop while holding: %v", err)
	}
	if d := time.Since(stopped); d > drainTimeout {
		t.Fatalf("the stop took %s, over relay.drain_timeout %s", d, drainTimeout)
	}

	dl, dead := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, opsYAML(name, debeziumTables(db.Name), map[string]string{"relay": relaySection,
		"broker": fmt.Sprintf("{url: %q, dead_letter_exchange: %s}", testenv.AMQPURL, dl.Exchange)}))
	msgs := dropinWait(t, got, len(good), 30*time.Second)
	if fmt.Sprint(messageIDs(msgs)) != fmt.Sprint(good) {
		t.Fatalf("delivered %v, want %v (each once, in order)", messageIDs(msgs), good)
	}
	if dlq := dropinWait(t, dead, 1, 10*time.Second); dlq[0].MessageID != bad {
		t.Fatalf("dead-lettered %s, want %s", dlq[0].MessageID, bad)
	}
}

// A debezium row to an exchange that does not exist goes to the dead-letter
// exchange with the broker's reason; the rows behind it flow.
func TestDebeziumMissingExchangeGoesToDeadLetterExchange(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/debezium_outbox.sql")
	br, got := testenv.NewCollectedBroker(t)
	dl, dead := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, opsYAML(testenv.UniqueName("dbz-dlx404"), debeziumTables(db.Name), map[string]string{
		"broker": fmt.Sprintf("{url: %q, dead_letter_exchange: %s}", testenv.AMQPURL, dl.Exchange)}))

	missing := testenv.UniqueName("no_such_exchange")
	good := []string{debeziumID("good", 1), debeziumID("good", 2)}
	bad := debeziumID("missing", 1)
	debeziumInsert(t, db, good[0], br.Exchange)
	debeziumInsert(t, db, bad, missing)
	debeziumInsert(t, db, good[1], br.Exchange)

	msgs := dropinWait(t, got, len(good), 30*time.Second)
	if fmt.Sprint(messageIDs(msgs)) != fmt.Sprint(good) {
		t.Fatalf("delivered %v, want %v", messageIDs(msgs), good)
	}
	dlq := dropinWait(t, dead, 1, 10*time.Second)
	if dlq[0].MessageID != bad || !headerNaming(dlq[0], missing) || !headerNaming(dlq[0], "does not exist", "404", "NOT_FOUND") {
		t.Fatalf("dead-lettered %s with headers %v; want %s with its exchange and the reason", dlq[0].MessageID, dlq[0].Headers, bad)
	}
}

// Without a dead-letter exchange, a debezium row to an exchange that does
// not exist holds the stream (retried with backoff), /readyz names it, and
// once the exchange is declared it is delivered, then the rows behind it:
// never skipped, order kept.
func TestDebeziumMissingExchangeHoldsUntilCreated(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, names and proxies; no server restarted (main_test.go)
	db := testenv.NewDB(t, "schema/debezium_outbox.sql")
	br, got := testenv.NewCollectedBroker(t)
	r := relaytest.StartRelay(t, opsYAML(testenv.UniqueName("dbz-wait"), debeziumTables(db.Name), map[string]string{
		"retry": "{base: 200ms, max: 1s}"}))
	base := httpAddr(t, r.App)

	later := testenv.UniqueName("ex_later")
	ids := []string{debeziumID("before", 1), debeziumID("held", 1), debeziumID("after", 1), debeziumID("after", 2)}
	debeziumInsert(t, db, ids[0], br.Exchange)
	debeziumInsert(t, db, ids[1], later)
	debeziumInsert(t, db, ids[2], br.Exchange)
	debeziumInsert(t, db, ids[3], br.Exchange)

	readyzNaming(t, base, 30*time.Second, ids[1], later)
	fams, _ := scrape(t, base)
	if v, _ := value(fams, "binlog_relay_publish_held_seconds"); v < 5 {
		t.Fatalf("binlog_relay_publish_held_seconds = %v, want over the 5 s grace", v)
	}
	if delivered := messageIDs(got.All()); fmt.Sprint(delivered) != fmt.Sprint(ids[:1]) {
		t.Fatalf("delivered %v while holding, want only %v", delivered, ids[:1])
	}

	declareExchange(t, later)
	br.BindQueueTo(t, br.Queue, later)
	msgs := dropinWait(t, got, len(ids), 30*time.Second)
	if fmt.Sprint(messageIDs(msgs)) != fmt.Sprint(ids) {
		t.Fatalf("delivered %v, want %v", messageIDs(msgs), ids)
	}
	var code int
	var body string
	testenv.Eventually(t, 10*time.Second, func() bool { code, body = readyzBody(t, base); return code == http.StatusOK },
		"/readyz not ready after the hold ended: %v", lastAnswer(func() string { return body }))
	fams, _ = scrape(t, base)
	if v, _ := value(fams, "binlog_relay_publish_held_seconds"); v != 0 {
		t.Fatalf("binlog_relay_publish_held_seconds = %v after the hold ended, want 0", v)
	}
}

// A backlog of rows to an exchange that was deleted is recorded row by row
// (PENDING, one retry, the reason) while the rows behind it flow, and the
// log gets a line per interval with a count, not a line per row.
func TestMissingExchangeBacklogIsRecordedAndLoggedOnce(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	p := relaytest.StartProcess(t, relaytest.WriteConfig(t, opsYAML(testenv.UniqueName("deleted-ex"), relaytest.SeedTable(db.Name),
		map[string]string{"http": `{addr: "off"}`})))
	p.WaitStarted(t)

	deleted := testenv.UniqueName("no_such_exchange")
	const n = 5000
	for i := range n / 1000 {
		stmt, _ := orderInsert(deleted, "gone", i, 1000)
		db.Exec(t, stmt)
	}
	want := insertOrders(t, db, br.Exchange, "after", 1, 10)
	msgs := dropinWait(t, got, len(want), 60*time.Second)
	if fmt.Sprint(messageIDs(msgs)) != fmt.Sprint(want) {
		t.Fatalf("delivered %v, want %v", messageIDs(msgs), want)
	}
	q := "SELECT COUNT(*) FROM producer_message WHERE exchange = ? AND status = 'PENDING' AND retry_count = 1 AND error_msg LIKE ?"
	var recorded int
	testenv.Eventually(t, 30*time.Second, func() bool {
		recorded = db.Count(t, q, deleted, "%does not exist%"+deleted+"%")
		return recorded == n
	}, "%d of %d rows to the deleted exchange recorded PENDING with one retry and the reason", recorded, n)

	lines := 0
	for _, l := range strings.Split(p.LogText(), "\n") {
		if strings.Contains(l, `"publish failed`) {
			lines++
		}
	}
	if lines < 1 || lines > 3 {
		t.Fatalf("%d \"publish failed\" log lines for %d failed rows, want 1 to 3 (one per 10 s with a count)", lines, n)
	}
}

// RabbitMQ 4 lowered max_message_size to 16 MiB (3.x: 128 MiB). With
// broker.max_message_bytes unset, the relay takes the limit from the
// version the broker announces: a row one byte over 16 MiB is never sent
// (the broker would close the channel) but set aside like any poison row,
// PENDING for its retries and then FAILED, with its size and the limit in
// error_msg, and the rows after it flow in order.
func TestBodyOverRabbitMQ4DefaultLimit(t *testing.T) {
	testenv.Integration(t)
	if !strings.HasPrefix(testenv.Current.Broker, "4.") {
		t.Skipf("RabbitMQ %s's default limit is 128 MiB: a row that large costs the suite far more than it shows; the same code path runs on RabbitMQ 4", testenv.Current.Broker)
	}
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("max16"), relaytest.SeedTable(db.Name), noSweeper))
	db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES ('huge', ?, 'k', ?)",
		br.Exchange, strings.Repeat("b", 16<<20+1))
	want := insertOrders(t, db, br.Exchange, "after", 10, 10)
	waitDeliveredOnceInOrder(t, got, want, 60*time.Second)
	var status, reason string
	testenv.WaitFor(t, 20*time.Second, "the huge row to be set aside with a reason", func() (bool, string) {
		if err := db.Primary.QueryRow("SELECT status, COALESCE(error_msg, '') FROM producer_message WHERE message_id = 'huge'").Scan(&status, &reason); err != nil {
			return false, err.Error()
		}
		return (status == "PENDING" || status == "FAILED") && reason != "", status + " " + reason
	})
	if !strings.Contains(reason, "too large") || !strings.Contains(reason, "16777217") || !strings.Contains(reason, "16777216") {
		t.Fatalf("error_msg %q: want it to say too large, the size 16777217 and the limit 16777216", reason)
	}
}

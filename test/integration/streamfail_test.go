package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// Issue 37, item 1: the stream port blackholed past
// broker.stream.confirm_timeout while rows of a status-less table (the
// debezium preset: nothing records a failure, nothing sweeps) stream into
// a RabbitMQ stream, then the connections reset, so what the lane held
// never goes through. The lane fails, the relay starts again from the last
// checkpoint every earlier row allows, and the stream ends holding every
// row once. Before the fix the checkpoint passed the failed lane's rows
// and they were never published.
func TestStreamLaneFailureLosesNoStatuslessRow(t *testing.T) {
	testenv.Integration(t)
	const rows, rate = 800, 100
	db := testenv.NewDB(t, "schema/debezium_outbox.sql")
	streamName := testenv.UniqueName("relay_stream")
	t.Cleanup(func() { testenv.DeleteStream(t, streamName) })
	px := testenv.Proxy(t, testenv.StreamAddr())
	name := testenv.UniqueName("streamfail")
	key := "binlog-relay:" + name + ":checkpoint"
	cfg := relaytest.WriteConfig(t, relaytest.Config{Name: name,
		Tables: fmt.Sprintf("  - {preset: debezium, schema: %s}\n", db.Name),
		Sections: map[string]string{"checkpoint": "", "relay": "",
			"broker": fmt.Sprintf("{url: %q, stream: {name: %s, uri: %q, confirm_timeout: 3s}}",
				testenv.AMQPURL, streamName, testenv.StreamURI(px.Addr())),
		}}.YAML())
	p := relaytest.StartProcess(t, cfg)
	// No status column, so no sweeper and no AMQP connection: started is
	// the binlog stream and the stream producer up.
	testenv.WaitFor(t, 30*time.Second, "the relay to start", func() (bool, string) {
		l := p.LogText()
		return strings.Contains(l, "binlog stream connected") && strings.Contains(l, "stream producer up"), "log:\n" + l
	})

	var want []string
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	var healAt time.Time
	for i := range rows {
		<-tick.C
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		db.Exec(t, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'Order', ?, 'OrderCreated', '{}')`,
			id, fmt.Sprintf("o-%d", i%17))
		want = append(want, id)
		switch {
		case i == rows/4:
			px.Blackhole() // past the 3 s confirm timeout
			healAt = time.Now().Add(5 * time.Second)
		case !healAt.IsZero() && time.Now().After(healAt):
			px.Cut() // what the lane held never goes through
			px.Restore()
			healAt = time.Time{}
		}
	}
	waitCheckpointCovers(t, key, primaryGTID(t, db))
	if !strings.Contains(p.LogText(), "the stream lane failed") {
		t.Fatalf("the stream lane never failed: the fault missed\n%s", tailText(p.LogText(), 3000))
	}
	got := testenv.ReadStreamIDs(t, streamName, time.Minute)
	seen, dups := map[string]bool{}, 0
	var order []string
	for _, id := range got {
		if id == "sentinel" {
			continue
		}
		if seen[id] {
			dups++
			continue
		}
		seen[id] = true
		order = append(order, id)
	}
	t.Logf("%d rows at %d rows/s, the stream port blackholed for 5 s then reset: the stream holds %d distinct, %d duplicates",
		rows, rate, len(seen), dups)
	if len(seen) != len(want) || dups != 0 {
		t.Fatalf("the stream holds %d distinct rows of %d with %d duplicates; want each once\n%s",
			len(seen), len(want), dups, tailText(p.LogText(), 3000))
	}
	assertSameOrder(t, order, want)
}

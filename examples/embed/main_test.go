package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// The program streams the stack's replica: every inserted row comes out
// once, in commit order, routed as the relay routes it; a second run goes
// on from the checkpoint the first one saved, without repeating a row.
func TestEmbedStreamsAndResumes(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/debezium_outbox.sql")
	rc, prefix := testenv.NewRedis(t, "embed")
	o := options{Source: testenv.ReplicaDSN, Table: db.Name + ".outbox", Preset: "debezium",
		Redis: testenv.RedisAddr, Key: prefix + "checkpoint"}

	// Start from the replica's position now, before the rows are written,
	// as the first run would have done had it been running already.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	flavor, err := binlog.DetectFlavor(ctx, db.Replica)
	if err != nil {
		t.Fatal(err)
	}
	now, err := binlog.CurrentPosition(ctx, db.Replica, flavor)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.NewRedis(rc, o.Key).Save(ctx, checkpoint.FromPosition(now, "", time.Now())); err != nil {
		t.Fatal(err)
	}

	// Two transactions of three and two rows, and one row after them.
	insert := func(ids ...int) {
		tx, err := db.Primary.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range ids {
			if _, err := tx.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'orders', ?, 'created', ?)",
				fmt.Sprintf("msg-%d", i), fmt.Sprintf("order-%d", i), fmt.Sprintf(`{"n":%d}`, i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	insert(1, 2, 3)
	insert(4, 5)

	// The first run stops after three messages, at the end of their
	// transaction.
	o.Max = 3
	expectLines(t, runOnce(t, ctx, o), 1, 2, 3)

	// The second run resumes after it: rows 4 and 5, then 6, none again.
	insert(6)
	o.Max = 3
	expectLines(t, runOnce(t, ctx, o), 4, 5, 6)

	// And a third from the end of row 6's transaction: row 7 only.
	insert(7)
	o.Max = 1
	expectLines(t, runOnce(t, ctx, o), 7)
	if _, err := checkpoint.NewRedis(rc, o.Key).Load(ctx); err != nil {
		t.Fatalf("the checkpoint after the last run: %v", err)
	}
}

// runOnce runs the program to its -max and returns what it printed.
func runOnce(t *testing.T, ctx context.Context, o options) []byte {
	t.Helper()
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	if err := run(ctx, o, &out, log); err != nil {
		t.Fatalf("run: %v", err)
	}
	return out.Bytes()
}

// expectLines checks the printed messages are the rows with these ids, in
// this order, each routed as the Debezium preset routes it.
func expectLines(t *testing.T, out []byte, ids ...int) {
	t.Helper()
	var got []line
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, l)
	}
	if len(got) != len(ids) {
		t.Fatalf("printed %d messages, want %d (ids %v):\n%s", len(got), len(ids), ids, out)
	}
	for i, id := range ids {
		l := got[i]
		var body map[string]any
		if err := json.Unmarshal([]byte(l.Body), &body); err != nil {
			t.Fatalf("message %d: body %q is not the JSON payload: %v", i, l.Body, err)
		}
		if l.MessageID != fmt.Sprintf("msg-%d", id) || l.Exchange != "orders" || l.RoutingKey != "created" ||
			l.Headers["aggregateid"] != fmt.Sprintf("order-%d", id) || !reflect.DeepEqual(body, map[string]any{"n": float64(id)}) {
			t.Fatalf("message %d is %+v, want row msg-%d routed to orders/created", i, l, id)
		}
	}
}

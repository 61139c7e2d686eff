package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The replay check tells the rows of a table marked by id alone
// (local_message) apart by their payload's CRC32: the replica computes it
// with CRC32() over the stored bytes, the relay over the bytes the binlog
// decoded, and the two must agree for every payload a row may hold, or a
// replayed row SENT already is published again. Rows of ASCII, multi-byte
// UTF-8, an empty payload and a large one, read back from the replica's
// binlog and looked up on the replica.
func TestSentFingerprintsAgreeWithTheBinlog(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/local_message.sql")
	tb := outboxtest.Preset(t, "local-message", db.Name, nil)
	gtid := "SELECT @@global.gtid_current_pos"
	if testenv.Current.MySQL {
		gtid = "SELECT @@global.gtid_executed"
	}
	start := binlog.Position{Flavor: binlogFlavor(), GTIDSet: queryString(t, db.Replica, gtid)}

	bodies := []string{`{"order": 1}`, "注文 ✓ — ünïcode", "", strings.Repeat("payload ", 20000)}
	for i, b := range bodies {
		db.Exec(t, "INSERT INTO local_message (id, biz_id, biz_type, exchange, message_body) VALUES (?, ?, 'order', 'x', ?)", i+1, fmt.Sprint("b-", i), b)
	}
	db.Exec(t, "UPDATE local_message SET status = 1")
	db.WaitReplicated(t, 30*time.Second)

	h, p := testenv.HostPort(testenv.ReplicaDSN)
	r, err := binlog.New(binlog.Config{Host: h, Port: uint16(p), User: "root", Flavor: binlogFlavor(),
		ServerID: uint32(410_000 + time.Now().UnixNano()%100_000)}, []*outbox.Table{tb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := make(chan binlog.Event, 64)
	go func() { _ = r.Run(ctx, start, out) }()
	fromBinlog := map[string]string{}
	var ids []any
	for len(ids) < len(bodies) {
		select {
		case ev := <-out:
			if ev.Kind == binlog.KindRow {
				ids = append(ids, ev.Row.ID)
				fromBinlog[colval.ValueString(ev.Row.ID)] = rowstatus.Fingerprint(tb, ev.Row.Values)
			}
		case <-ctx.Done():
			t.Fatalf("read %d of %d rows from the replica's binlog", len(ids), len(bodies))
		}
	}
	sent, err := rowstatus.SentReader{DB: db.Replica}.Sent(ctx, tb, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i := range bodies {
		id := fmt.Sprint(i + 1)
		if got, want := sent[id], fromBinlog[id]; got != want || want == "" {
			t.Errorf("row %s (%d bytes): the replica's CRC32 %q, the binlog row's %q; want them equal", id, len(bodies[i]), got, want)
		}
	}
}

package rowstatus_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
)

// transactions counts the transactions a GTID position names: the sum of
// the sequence numbers of MariaDB's gtid_binlog_pos (one per domain), the
// sizes of the intervals of MySQL's gtid_executed.
func transactions(t *testing.T, pos string) int64 {
	t.Helper()
	var n int64
	num := func(s string) int64 {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("GTID position %q: %v", pos, err)
		}
		return v
	}
	for _, set := range strings.Split(pos, ",") {
		parts := strings.Split(strings.TrimSpace(set), ":")
		if !testenv.Current.MySQL {
			f := strings.Split(parts[0], "-")
			n += num(f[len(f)-1])
			continue
		}
		for _, iv := range parts[1:] {
			lo, hi, ok := strings.Cut(iv, "-")
			if !ok {
				hi = lo
			}
			n += num(hi) - num(lo) + 1
		}
	}
	return n
}

// Several tables' marks written together are one transaction on the
// primary (one GTID), on the marks' minimal-image session; a table that
// does not exist among them (dropped, or its schema dropped: a tenant's
// DROP DATABASE) is reported missing and the others still commit, as the
// failed statement alone is rolled back.
func TestMarkSentTogetherIsOneTransaction(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	names := []string{"producer_message", "tenant_b", "tenant_c"}
	for _, n := range names[1:] {
		db.Exec(t, "CREATE TABLE "+n+" LIKE producer_message")
	}
	var groups []rowstatus.TableMarks
	for _, n := range names {
		db.Exec(t, "INSERT INTO "+n+" (id, message_id, exchange, content) VALUES (1, 'm-1', 'ex', '{}'), (2, 'm-2', 'ex', '{}'), (3, 'm-3', 'ex', '{}')")
		db.Exec(t, "UPDATE "+n+" SET status = 'SENT' WHERE id = 3")
		tb := outboxtest.Preset(t, "producer-message", db.Name, nil)
		tb.Name = n
		var m rowstatus.Marks
		for id := 1; id <= 3; id++ {
			m.Add(int64(id), "m-"+strconv.Itoa(id))
		}
		groups = append(groups, rowstatus.TableMarks{Table: tb, Marks: m})
	}
	dropped := *groups[1].Table
	dropped.Name = "tenant_dropped"
	goneSchema := *groups[2].Table
	goneSchema.Schema = db.Name + "_gone"
	groups = append(groups[:2], append([]rowstatus.TableMarks{{Table: &dropped, Marks: groups[0].Marks}, {Table: &goneSchema, Marks: groups[0].Marks}}, groups[2:]...)...)

	w := rowstatus.NewWriter(db.Primary, rowstatus.Retry{})
	w.Image = rowstatus.ImageMinimal
	t.Cleanup(func() { _ = w.Close() })
	ctx := context.Background()
	if img, err := w.MarkImage(ctx); img != rowstatus.ImageMinimal {
		t.Fatalf("marks' image %s (%v); want minimal (the stack's relay user may set it)", img, err)
	}
	before, err := testenv.Current.GTIDPos(ctx, db.Primary)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.MarkSentTogether(ctx, groups)
	if err != nil {
		t.Fatal(err)
	}
	after, err := testenv.Current.GTIDPos(ctx, db.Primary)
	if err != nil {
		t.Fatal(err)
	}
	if n := transactions(t, after) - transactions(t, before); n != 1 {
		t.Fatalf("the primary logged %d transactions (%s -> %s); want 1 for the marks of %d tables", n, before, after, len(groups))
	}
	for i, g := range groups {
		missing := g.Table == &dropped || g.Table == &goneSchema
		if missing != rowstatus.TableMissing(res[i].Missing) || (!missing && res[i].Rows != 2) {
			t.Errorf("%s: %+v; want missing %v, else 2 rows marked", g.Table.FullName(), res[i], missing)
		}
	}
	db.WaitReplicated(t, 30*time.Second)
	for _, n := range names {
		var sent int
		if err := db.Replica.QueryRow("SELECT COUNT(*) FROM " + db.Name + "." + n + " WHERE status = 'SENT'").Scan(&sent); err != nil || sent != 3 {
			t.Errorf("%s on the replica: %d rows SENT (%v); want 3", n, sent, err)
		}
	}
}

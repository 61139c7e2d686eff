package binlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

func TestParseRenames(t *testing.T) {
	for q, want := range map[string]string{
		"RENAME TABLE producer_message TO producer_message_2026_11, producer_message_new TO producer_message": "[{app producer_message app producer_message_2026_11} {app producer_message_new app producer_message}]",
		"rename table `app`.`t` to `arch`.`t``x`":                                                             "[{app t arch t`x}]",
		"RENAME TABLES IF EXISTS t WAIT 5 TO t2":                                                              "[{app t app t2}]",
		"RENAME TABLE t NOWAIT TO t2":                                                                         "[{app t app t2}]",
		"/* gh-ost */ RENAME TABLE `app`.`t` TO `app`.`_t_del`, `app`.`_t_gho` TO `app`.`t`":                  "[{app t app _t_del} {app _t_gho app t}]",
		"ALTER TABLE t RENAME TO t_old":                                                                       "[{app t app t_old}]",
		"alter online table other.t add column c int, rename as other.t2":                                     "[{other t other t2}]",
		"ALTER TABLE t RENAME t3":                                                                             "[{app t app t3}]",
		"ALTER TABLE t RENAME COLUMN a TO b":                                                                  "[]",
		"ALTER TABLE t RENAME INDEX a TO b, ADD COLUMN rename_me INT":                                         "[]",
		"ALTER TABLE t ADD COLUMN c VARCHAR(9) DEFAULT 'RENAME TO x'":                                         "[]",
		"CREATE TABLE t2 LIKE t":                                                                              "[]",
		"RENAME USER a TO b":                                                                                  "[]",
	} {
		pairs, _ := parseRenames("app", q)
		got := fmt.Sprint(pairs)
		if pairs == nil {
			got = "[]"
		}
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", q, got, want)
		}
	}
}

// A rename of an outbox table sends a rename event before the statement's
// commit; one that swaps another table in under its name still names where
// the old rows went, and one that leaves the table where it was sends none.
func TestRenameEvents(t *testing.T) {
	sc := newScript(t, Config{})
	ddl := func(seq uint64, q string) []Event {
		// A DDL's event group is standalone (FL_STANDALONE): no BEGIN.
		sc.must(replication.MARIADB_GTID_EVENT, &replication.MariadbGTIDEvent{
			GTID: mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: seq}, Flags: replication.BINLOG_MARIADB_FL_STANDALONE})
		sc.must(replication.QUERY_EVENT, &replication.QueryEvent{Schema: []byte("app"), Query: []byte(q)})
		var evs []Event
		for len(sc.out) > 0 {
			evs = append(evs, <-sc.out)
		}
		return evs
	}
	evs := ddl(1, "RENAME TABLE producer_message TO producer_message_2026_11, producer_message_new TO producer_message")
	if len(evs) != 2 || evs[0].Kind != KindRename || evs[1].Kind != KindCommit {
		t.Fatalf("events %+v; want a rename, then the commit", evs)
	}
	if r := evs[0].Rename; r.Table.Name != "producer_message" || r.Schema != "app" || r.Name != "producer_message_2026_11" || !r.Replaced {
		t.Fatalf("rename %+v; want to producer_message_2026_11, replaced", r)
	}
	if evs := ddl(2, "RENAME TABLE producer_message TO tmp, tmp TO producer_message"); len(evs) != 1 || evs[0].Kind != KindCommit {
		t.Fatalf("a rename there and back: %+v", evs)
	}
	if evs := ddl(3, "RENAME TABLE other TO other2"); len(evs) != 1 || evs[0].Kind != KindCommit {
		t.Fatalf("another table's rename: %+v", evs)
	}
	// gh-ost's cut-over, the ghost table renamed in under the name.
	evs = ddl(4, "RENAME TABLE `app`.`producer_message` TO `app`.`_producer_message_del`, `app`.`_producer_message_gho` TO `app`.`producer_message`")
	if len(evs) != 2 || evs[0].Rename.Name != "_producer_message_del" || !evs[0].Rename.Replaced {
		t.Fatalf("gh-ost's cut-over: %+v; want a rename to _producer_message_del, replaced", evs)
	}
	// Renamed away, nothing in its place (yet), or moved on after.
	evs = ddl(5, "RENAME TABLE producer_message TO a, new TO producer_message, producer_message TO b")
	if len(evs) != 2 || evs[0].Rename.Replaced || evs[0].Rename.Name != "a" {
		t.Fatalf("renamed away, another table in and away again: %+v; want a rename to a, not replaced", evs)
	}
}

// Inserts into a table that a rename took away from its configured name
// are not published, by the binlog path nor by the sweeper: the first one
// is warned about once, naming the table and the configured name.
func TestInsertsIntoARenamedAwayTableAreWarnedOnce(t *testing.T) {
	sc := newScript(t, Config{})
	var logged bytes.Buffer
	sc.s.r.log = slog.New(slog.NewJSONHandler(&logged, nil))
	sc.must(replication.MARIADB_GTID_EVENT, &replication.MariadbGTIDEvent{
		GTID: mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 1}, Flags: replication.BINLOG_MARIADB_FL_STANDALONE})
	sc.must(replication.QUERY_EVENT, &replication.QueryEvent{Schema: []byte("app"),
		Query: []byte("RENAME TABLE producer_message TO producer_message_2026_11, producer_message_new TO producer_message")})
	archive, other := *sc.tme, *sc.tme
	archive.Table, other.Table = []byte("producer_message_2026_11"), []byte("audit")
	for i, tme := range []*replication.TableMapEvent{&other, &archive, &archive, &other, &archive} {
		sc.gtid(uint64(2 + i))
		// Not an outbox table: the decoder left the rows out.
		sc.must(replication.WRITE_ROWS_EVENTv2, &replication.RowsEvent{Table: tme})
		sc.xid()
	}
	var warned []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l["level"] == "WARN" {
			warned = append(warned, l)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("warnings %v; want one", warned)
	}
	w := warned[0]
	msg, _ := w["msg"].(string)
	if w["table"] != "app.producer_message_2026_11" || w["configured"] != "app.producer_message" ||
		!strings.Contains(msg, "not published") || !strings.Contains(msg, "sweeper") || !strings.Contains(msg, "tables:") {
		t.Fatalf("warning %v; want it to name the table and the configured one, and say that neither path sends the rows and what to do", w)
	}
}

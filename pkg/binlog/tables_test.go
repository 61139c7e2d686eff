package binlog

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// prefixMatcher matches every table called producer_message in a schema
// starting with "tenant_", as a pattern entry "tenant_*" would.
type prefixMatcher struct{ entry *outbox.Table }

func (m prefixMatcher) Table(schema, name string) (*outbox.Table, error) {
	if strings.HasPrefix(schema, "tenant_") && name == "producer_message" {
		return m.entry.Matched(schema, name), nil
	}
	return nil, nil
}

// recorder is a TableObserver that writes down what it hears.
type recorder struct{ heard []string }

func (r *recorder) TableAdded(t *outbox.Table)   { r.heard = append(r.heard, "added "+t.FullName()) }
func (r *recorder) TableDropped(t *outbox.Table) { r.heard = append(r.heard, "dropped "+t.FullName()) }
func (r *recorder) TableRefused(schema, name string, _ error) {
	r.heard = append(r.heard, "refused "+schema+"."+name)
}

// TestTablesMatchedWhileStreaming: a tenant created while streaming is
// read from its first rows (in the transaction right after its CREATE); a
// tenant whose table lacks a mapped column is refused alone while the
// other's rows flow, and read again after an ALTER; a dropped one is
// reported gone.
func TestTablesMatchedWhileStreaming(t *testing.T) {
	entry := seedTable(t)
	entry.Schema = "tenant_*"
	sc := newScriptOf(t, Config{}, seedTable(t), tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated))
	rec := &recorder{}
	sc.s.r.matcher, sc.s.r.observer = prefixMatcher{entry}, rec

	fits := func(schema string) *replication.TableMapEvent {
		tme := tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated)
		tme.Schema = []byte(schema)
		return tme
	}
	insert := func(tme *replication.TableMapEvent, ids ...int) {
		t.Helper()
		e := &replication.RowsEvent{Table: tme, ColumnBitmap1: []byte{0xff}}
		for _, id := range ids {
			row := []any{int64(id), fmt.Sprintf("m-%d", id), "ex", "rk", []byte("{}"), "PENDING", time.Unix(1_700_000_000, 0).UTC()}
			if len(tme.ColumnName) == 6 { // no routing_key
				row = append(row[:3], row[4:]...)
			}
			e.Rows = append(e.Rows, row)
		}
		sc.must(replication.WRITE_ROWS_EVENTv2, e)
	}
	tx := func(seq uint64, tme *replication.TableMapEvent, ids ...int) {
		sc.gtid(seq)
		sc.query("BEGIN")
		insert(tme, ids...)
		sc.xid()
	}

	sc.gtid(1)
	sc.query("CREATE DATABASE tenant_1")
	sc.gtid(2)
	sc.query("CREATE TABLE tenant_1.producer_message (id BIGINT PRIMARY KEY)")
	tx(3, fits("tenant_1"), 1, 2)
	// A tenant first met by its rows (its CREATE before the relay's start).
	tx(4, fits("tenant_2"), 3)

	bad := tableMap(true, cID, cMsgID, cEx, cBody, cStatus, cCreated)
	bad.Schema = []byte("tenant_3")
	sc.gtid(5)
	sc.query("CREATE TABLE tenant_3.producer_message (id BIGINT PRIMARY KEY)")
	tx(6, bad, 4)
	tx(7, fits("tenant_1"), 5)
	tx(8, bad, 6)
	sc.gtid(9)
	sc.query("ALTER TABLE tenant_3.producer_message ADD COLUMN routing_key VARCHAR(255)")
	tx(10, fits("tenant_3"), 7)
	sc.gtid(11)
	sc.query("DROP DATABASE tenant_1")
	// Not a tenant: never read.
	other := tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated)
	other.Schema = []byte("shop")
	sc.gtid(12)
	sc.query("BEGIN")
	sc.must(replication.WRITE_ROWS_EVENTv2, &replication.RowsEvent{Table: other, ColumnBitmap1: []byte{0xff}})
	sc.xid()

	expect(t, sc.drain(), "1 2 c 3 c c 5 c c 7 c c") // the DDL groups end at the next GTID
	want := "added tenant_1.producer_message; added tenant_2.producer_message; added tenant_3.producer_message; refused tenant_3.producer_message; " +
		"added tenant_3.producer_message; dropped tenant_1.producer_message"
	if got := strings.Join(rec.heard, "; "); got != want {
		t.Errorf("observer heard\n %s\nwant\n %s", got, want)
	}
}

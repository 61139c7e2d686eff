package binlog

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
)

// minimal logs one UPDATE as a session with binlog_row_image=MINIMAL does:
// the id alone before, the columns the statement set after (set: their
// positions in the seed table, with status at 5).
func (sc *script) minimal(status string, set []int, ids ...int) error {
	bitmap2 := byte(0)
	for _, c := range set {
		bitmap2 |= 1 << c
	}
	e := &replication.RowsEvent{Table: sc.tme, ColumnBitmap1: []byte{0b1}, ColumnBitmap2: []byte{bitmap2}}
	for _, id := range ids {
		before, after := make([]any, 7), make([]any, 7)
		before[0] = int64(id)
		for _, c := range set {
			if c == 5 {
				after[c] = status
			}
		}
		e.Rows = append(e.Rows, before, after)
	}
	return sc.feed(replication.UPDATE_ROWS_EVENTv2, e)
}

// The relay's own SENT marks logged minimal (the source passes on the
// primary's image) are told by their status and skipped; a re-queue of the
// same rows after them, logged in full, is published (invariant 11).
func TestMinimalMarksSkippedAndRequeueSeen(t *testing.T) {
	sc := newScript(t, Config{})
	sc.gtid(1)
	sc.query("BEGIN")
	sc.insert("PENDING", 1, 2)
	sc.xid()
	sc.gtid(2)
	sc.query("BEGIN")
	if err := sc.minimal("SENT", []int{5}, 1, 2); err != nil {
		t.Fatalf("a minimal SENT mark: %v", err)
	}
	sc.xid()
	sc.gtid(3)
	sc.query("BEGIN")
	sc.update("SENT", "PENDING", "{}", 2)
	sc.xid()
	expect(t, sc.drain(), "1 2 c c 2 c")
}

// A partial image that could publish something stops the stream and names
// the missing column: it sets a publishable status (a re-queue cannot be
// told, nor published, from it), it updates a row its own transaction
// holds, its before image has no id, or it leaves the status out.
func TestMinimalImagesThatCannotBeSkipped(t *testing.T) {
	for name, c := range map[string]struct {
		run  func(sc *script) error
		want string
	}{
		"sets a publishable status": {func(sc *script) error { return sc.minimal("PENDING", []int{5}, 1) }, "leaves column"},
		"a held row": {func(sc *script) error {
			sc.insert("PENDING", 1)
			return sc.minimal("SENT", []int{5}, 1)
		}, "leaves column"},
		"no status after": {func(sc *script) error { return sc.minimal("", []int{6}, 1) }, "leaves column"},
		"no id before": {func(sc *script) error {
			e := &replication.RowsEvent{Table: sc.tme, ColumnBitmap1: []byte{0b10}, ColumnBitmap2: []byte{0b100000}}
			e.Rows = [][]any{{nil, "m-1", nil, nil, nil, nil, nil}, {nil, nil, nil, nil, nil, "SENT", nil}}
			return sc.feed(replication.UPDATE_ROWS_EVENTv2, e)
		}, "leaves column"},
	} {
		t.Run(name, func(t *testing.T) {
			sc := newScript(t, Config{})
			sc.gtid(1)
			sc.query("BEGIN")
			err := c.run(sc)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "binlog_row_image=FULL") {
				t.Fatalf("%v; want the stream stopped, naming the missing column and binlog_row_image=FULL", err)
			}
			for _, got := range sc.drain() {
				if got != "c" {
					t.Fatalf("emitted row %s from a partial image", got)
				}
			}
		})
	}
}

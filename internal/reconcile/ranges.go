package reconcile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
)

// keyRanges walks a table's key in ranges of at most n rows, so that no
// statement examines more than n rows whatever else it filters on: a window
// at the end of a large table without an index on the time column would
// otherwise cost one statement a scan of everything before it (and the
// client's read timeout). Each range ends at the n-th key after the last one,
// found by walking the key itself, the way pt-table-checksum divides a table.
type keyRanges struct {
	db         *sql.DB
	table, key string // quoted
	n          int
	lo, hi     any // the range is key > lo (nil: from the start) AND key <= hi (nil: to the end)
	started    bool
	done       bool
	repeat     bool // the range goes on after a full read (more)
}

func newKeyRanges(db *sql.DB, table, key string, n int) *keyRanges {
	return &keyRanges{db: db, table: table, key: key, n: n}
}

// next moves to the next range; false when the table is done.
func (k *keyRanges) next(ctx context.Context) (bool, error) {
	if k.repeat {
		k.repeat = false
		return true, nil
	}
	if k.done {
		return false, nil
	}
	if k.started {
		k.lo = k.hi
	}
	k.started = true
	q := "SELECT " + k.key + " FROM " + k.table
	var args []any
	if k.lo != nil {
		q += " WHERE " + k.key + " > ?"
		args = append(args, k.lo)
	}
	q += fmt.Sprintf(" ORDER BY %s LIMIT 1 OFFSET %d", k.key, k.n-1)
	var hi any
	err := sqlrows.Each(ctx, k.db, q, args, func(rs *sql.Rows, types []*sql.ColumnType) error {
		var text sql.RawBytes
		if err := rs.Scan(&text); err != nil {
			return err
		}
		if text == nil {
			return errors.New("a NULL primary key")
		}
		hi = keyValue(string(text), sqlrows.IntType(types[0]))
		return nil
	})
	if err != nil {
		return false, err
	}
	// No row: fewer than n rows are left, and the last range is open at the end.
	k.hi, k.done = hi, hi == nil
	return true, nil
}

// cond is the current range as a condition on the key, with its arguments.
func (k *keyRanges) cond() (string, []any) {
	var conds []string
	var args []any
	if k.lo != nil {
		conds, args = append(conds, k.key+" > ?"), append(args, k.lo)
	}
	if k.hi != nil {
		conds, args = append(conds, k.key+" <= ?"), append(args, k.hi)
	}
	if len(conds) == 0 {
		return "1", nil
	}
	return strings.Join(conds, " AND "), args
}

// more is called when a read of the range came back with n rows: rows may
// have arrived in it since it was drawn (keys that do not grow, such as
// UUIDs, or the open last range), so the same range is read again after
// last, the key of the last row read.
func (k *keyRanges) more(last any) {
	k.lo, k.repeat = last, true
}

// keyValue is a key read as text, as the next statement passes it: an
// integer key as a number. Compared with a string, MySQL may compare as
// DOUBLE, which rounds ids above 2^53 (snowflake ids); a number is exact on
// every server.
func keyValue(text string, intKey bool) any {
	if intKey {
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return n
		}
		if n, err := strconv.ParseUint(text, 10, 64); err == nil {
			return n
		}
	}
	return text
}

package sqlrows_test

import (
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// Each hands every row to the scan with the column types, and ends at the
// first error: the query's or one a scan returns.
func TestEach(t *testing.T) {
	db := testenv.Primary(t)
	const three = "SELECT 1 AS n, 'a' AS s UNION ALL SELECT 2, 'b' UNION ALL SELECT 3, 'c'"
	var got []string
	var intCols []bool
	err := sqlrows.Each(t.Context(), db, three, nil, func(rs *sql.Rows, types []*sql.ColumnType) error {
		var n, s string
		intCols = []bool{sqlrows.IntType(types[0]), sqlrows.IntType(types[1])}
		err := rs.Scan(&n, &s)
		got = append(got, n+s)
		return err
	})
	if err != nil || !slices.Equal(got, []string{"1a", "2b", "3c"}) || !slices.Equal(intCols, []bool{true, false}) {
		t.Errorf("Each read %v, integer columns %v, error %v; want [1a 2b 3c], [true false], nil", got, intCols, err)
	}

	stop := errors.New("stop")
	calls := 0
	err = sqlrows.Each(t.Context(), db, three, nil, func(*sql.Rows, []*sql.ColumnType) error {
		if calls++; calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Errorf("a failing scan: error %v after %d calls, want %v after 2", err, calls, stop)
	}

	if err := sqlrows.Each(t.Context(), db, "SELECT no_such_column", nil, func(*sql.Rows, []*sql.ColumnType) error {
		t.Error("scan called for a query that failed")
		return nil
	}); err == nil {
		t.Error("a failing query returned no error")
	}
}

// ScanText reads each column of a row as text, NULL as not Valid.
func TestScanText(t *testing.T) {
	db := testenv.Primary(t)
	var got [][]sql.NullString
	err := sqlrows.Each(t.Context(), db, "SELECT 'a' AS s, NULL AS z, 3 AS n", nil, func(rs *sql.Rows, types []*sql.ColumnType) error {
		vals, err := sqlrows.ScanText(rs, len(types))
		got = append(got, vals)
		return err
	})
	want := []sql.NullString{{String: "a", Valid: true}, {}, {String: "3", Valid: true}}
	if err != nil || len(got) != 1 || !slices.Equal(got[0], want) {
		t.Errorf("ScanText read %v, error %v; want one row %v", got, err, want)
	}
	err = sqlrows.Each(t.Context(), db, "SELECT 1, 2", nil, func(rs *sql.Rows, _ []*sql.ColumnType) error {
		_, err := sqlrows.ScanText(rs, 1)
		return err
	})
	if err == nil {
		t.Error("ScanText of 1 column in a row of 2 returned no error")
	}
}

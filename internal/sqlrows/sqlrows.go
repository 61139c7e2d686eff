// Package sqlrows runs a query and hands each row it returns to a function.
// It owns the part of reading a result that a hand-written loop easily gets
// wrong: closing the rows on every path and checking rows.Err() after the
// last one, without which a result cut short (a lost connection, a killed
// query) reads as complete. It also scans a row of columns not known in
// advance as text (ScanText).
package sqlrows

import (
	"context"
	"database/sql"
	"strings"
)

// Querier is what Each needs of a *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Each runs query and calls scan for each row, with the result's column
// types. The first error ends it: the query's, one scan returns, or the
// result's own.
func Each(ctx context.Context, db Querier, query string, args []any, scan func(rs *sql.Rows, types []*sql.ColumnType) error) error {
	rs, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	types, err := rs.ColumnTypes()
	if err != nil {
		return err
	}
	for rs.Next() {
		if err := scan(rs, types); err != nil {
			return err
		}
	}
	if err := rs.Err(); err != nil {
		return err
	}
	return rs.Close()
}

// ScanText scans the current row of rs, of n columns, as nullable text:
// for a result whose columns are read by name or position, not known in
// advance (a CALL, a SHOW statement).
func ScanText(rs *sql.Rows, n int) ([]sql.NullString, error) {
	vals := make([]sql.NullString, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rs.Scan(ptrs...); err != nil {
		return nil, err
	}
	return vals, nil
}

// IntType reports whether a column is of an integer type (TINYINT to
// BIGINT, signed or not), whose values a later statement should pass back
// as numbers.
func IntType(t *sql.ColumnType) bool {
	return strings.Contains(t.DatabaseTypeName(), "INT")
}

// Package showrow reads the first row of a SHOW statement whose columns
// differ between server versions (SHOW SLAVE STATUS, SHOW MASTER STATUS),
// by column name. The bench and the test stack's binlog purge share it.
package showrow

import (
	"context"
	"database/sql"
	"fmt"
)

// Querier is what First needs of a *sql.DB or *sql.Conn.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// First returns the first row of query as column name -> text; a query
// that returns no row is an error naming it.
func First(ctx context.Context, db Querier, query string) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s returned no row", query)
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(cols))
	for i, c := range cols {
		out[c] = string(vals[i])
	}
	return out, nil
}

// Package showrow reads the first row of a SHOW statement whose columns
// differ between server versions (SHOW SLAVE STATUS, SHOW MASTER STATUS),
// by column name. The bench and the test stack's binlog purge share it.
package showrow

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
)

// Querier is what First needs of a *sql.DB or *sql.Conn.
type Querier = sqlrows.Querier

// First returns the first row of query as column name -> text; a query
// that returns no row is an error naming it.
func First(ctx context.Context, db Querier, query string) (map[string]string, error) {
	var out map[string]string
	err := sqlrows.Each(ctx, db, query, nil, func(rs *sql.Rows, types []*sql.ColumnType) error {
		if out != nil {
			return nil // a SHOW statement of several rows (replication channels): the first is wanted
		}
		vals := make([]sql.RawBytes, len(types))
		ptrs := make([]any, len(types))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return err
		}
		out = make(map[string]string, len(types))
		for i, t := range types {
			out[t.Name()] = string(vals[i])
		}
		return nil
	})
	if err == nil && out == nil {
		err = fmt.Errorf("%s returned no row", query)
	}
	return out, err
}

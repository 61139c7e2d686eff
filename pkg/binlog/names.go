package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// How the source compares schema and table names: its
// lower_case_table_names, a start-up setting of the server.
//
//   - 0 (the default on Linux): names are stored and compared as written,
//     so `Outbox` and `outbox` are two tables, and the binlog names each
//     as it was created.
//   - 1 (the default on Windows): names are stored in lower case and
//     compared without case; the binlog names them in lower case.
//   - 2 (the default on macOS): names are stored as written and compared
//     in lower case.
//
// The reader matches the binlog's names to the configured tables, and
// follows renames, by the same rule (Config.LowerCaseTableNames).
// https://dev.mysql.com/doc/refman/8.4/en/identifier-case-sensitivity.html

// tableID is a table as the source tells tables apart: schema and name,
// folded to lower case where the source compares them without case.
type tableID struct{ schema, name string }

// tableID is the reader's key of schema.table.
func (r *Reader) tableID(schema, table string) tableID {
	return newTableID(r.cfg.LowerCaseTableNames, schema, table)
}

func newTableID(lowerCaseTableNames int, schema, table string) tableID {
	if lowerCaseTableNames != 0 {
		return tableID{strings.ToLower(schema), strings.ToLower(table)}
	}
	return tableID{schema, table}
}

// outboxTable is the configured table the source calls schema.table, nil
// for any other.
func (r *Reader) outboxTable(schema, table string) *outbox.Table {
	return r.tables[r.tableID(schema, table)]
}

func (id tableID) String() string { return id.schema + "." + id.name }

// DetectLowerCaseTableNames reads the server's lower_case_table_names
// (0, 1 or 2), for Config.LowerCaseTableNames.
func DetectLowerCaseTableNames(ctx context.Context, db *sql.DB) (int, error) {
	var v int
	if err := db.QueryRowContext(ctx, "SELECT @@lower_case_table_names").Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the server's lower_case_table_names: %w", err)
	}
	if v < 0 || v > 2 {
		return 0, fmt.Errorf("the server's lower_case_table_names is %d, not 0, 1 or 2", v)
	}
	return v, nil
}

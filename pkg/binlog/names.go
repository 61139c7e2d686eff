package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/tablerename"
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
// folded to lower case where the source compares them without case (the
// rename tracker's names are those).
type tableID = tablerename.Name

// tableID is the reader's key of schema.table.
func (r *Reader) tableID(schema, table string) tableID {
	return newTableID(r.cfg.LowerCaseTableNames, schema, table)
}

func newTableID(lowerCaseTableNames int, schema, table string) tableID {
	if lowerCaseTableNames != 0 {
		return tableID{Schema: strings.ToLower(schema), Table: strings.ToLower(table)}
	}
	return tableID{Schema: schema, Table: table}
}

// newRenameTracker follows the configured tables through renames, from
// the start of a stream.
func (r *Reader) newRenameTracker() *tablerename.Tracker {
	r.tablesMu.RLock()
	defer r.tablesMu.RUnlock()
	names := make([]tablerename.Name, len(r.tableList))
	for i, t := range r.tableList {
		names[i] = r.tableID(t.Schema, t.Name)
	}
	return tablerename.New(names)
}

// syncRenames has the stream's rename tracker follow the tables matched
// since it last looked (tableList only grows).
func (s *stream) syncRenames() {
	r := s.r
	r.tablesMu.RLock()
	defer r.tablesMu.RUnlock()
	for i := s.renames.Len(); i < len(r.tableList); i++ {
		t := r.tableList[i]
		s.renames.Add(r.tableID(t.Schema, t.Name))
	}
}

// tableAt is the i-th table met.
func (r *Reader) tableAt(i int) *outbox.Table {
	r.tablesMu.RLock()
	defer r.tablesMu.RUnlock()
	return r.tableList[i]
}

// indexOf is a table's index in tableList.
func (r *Reader) indexOf(t *outbox.Table) int {
	r.tablesMu.RLock()
	defer r.tablesMu.RUnlock()
	return r.tableIndex[t]
}

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

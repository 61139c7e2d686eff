package rowstatus

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// SentReader tells which rows are SENT now, reading the source replica (never
// the primary): the relay asks it of the rows it replays after a restart, so
// that rows a killed run had published and marked are not published again.
type SentReader struct {
	DB *sql.DB
}

// Sent returns, of ids (rows of t), the ones whose status is SENT now, keyed
// by the id's text, each with its message id's ("" when the table has no
// message-id column of its own): the text colval.ValueString gives a value
// the binlog decoded. A table without a status column has none.
func (s SentReader) Sent(ctx context.Context, t *outbox.Table, ids []any) (map[string]string, error) {
	out := map[string]string{}
	if t.Columns.Status == "" || len(ids) == 0 {
		return out, nil
	}
	rows, err := s.DB.QueryContext(ctx, outboxsql.SentAmongSQL(t, len(ids)), ids...)
	if err != nil {
		return nil, fmt.Errorf("reading which of %d replayed rows of %s are sent: %w", len(ids), t.FullName(), err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, msg sql.RawBytes
		dest := []any{&id}
		if len(cols) > 1 {
			dest = append(dest, &msg)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("reading which replayed rows of %s are sent: %w", t.FullName(), err)
		}
		out[string(id)] = string(msg)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading which replayed rows of %s are sent: %w", t.FullName(), err)
	}
	return out, nil
}

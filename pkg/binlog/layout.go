package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// layout maps one table's binlog column positions to the columns the relay
// needs, for one TABLE_MAP event.
type layout struct {
	tme      *replication.TableMapEvent
	names    []string // needed column names
	idx      []int    // their positions in the row image
	unsigned []bool   // integer column declared UNSIGNED
}

func (l *layout) row(t *outbox.Table, values []any) *outbox.Row {
	row := &outbox.Row{Table: t, Values: make(map[string]any, len(l.names))}
	for i, name := range l.names {
		v := values[l.idx[i]]
		if l.unsigned[i] {
			v = toUnsigned(v)
		}
		if b, ok := v.([]byte); ok {
			// go-mysql may hand out slices of the packet buffer.
			v = append([]byte(nil), b...)
		}
		row.Values[name] = v
	}
	row.ID = row.Values[t.Columns.ID]
	return row
}

// toUnsigned reinterprets a signed decode of an UNSIGNED column: go-mysql
// decodes integers by size and leaves signedness to the caller.
func toUnsigned(v any) any {
	switch x := v.(type) {
	case int8:
		return uint8(x)
	case int16:
		return uint16(x)
	case int32:
		return uint32(x)
	case int64:
		return uint64(x)
	}
	return v
}

// neededColumns lists every column a table's mapping reads.
func neededColumns(t *outbox.Table) []string {
	seen := map[string]bool{}
	var out []string
	for _, col := range t.MappedColumns() {
		if !seen[strings.ToLower(col)] {
			seen[strings.ToLower(col)] = true
			out = append(out, col)
		}
	}
	return out
}

// layoutFor returns the column layout for a TABLE_MAP event. Column names
// come from the event itself when the source logs them
// (binlog_row_metadata=FULL, MySQL 8.0.1+ / MariaDB 10.5+), which makes an
// ALTER TABLE while streaming harmless: each row is decoded with the names
// of its own table map. Otherwise the schema read from the source is used,
// refreshed after DDL on the table.
func (r *Reader) layoutFor(ctx context.Context, t *outbox.Table, tme *replication.TableMapEvent) (*layout, error) {
	key := tableKey(t.Schema, t.Name)
	r.layoutMu.Lock()
	cached := r.layouts[key]
	r.layoutMu.Unlock()
	if cached != nil && cached.tme == tme {
		return cached, nil
	}
	names := tme.ColumnNameString()
	if len(names) == 0 {
		if r.schemas == nil {
			return nil, fmt.Errorf("table %s: the source does not log column names (set binlog_row_metadata=FULL) and no schema source is configured", t.FullName())
		}
		var err error
		names, err = r.schemas.Columns(ctx, t.Schema, t.Name)
		if err != nil {
			return nil, fmt.Errorf("reading columns of %s: %w", t.FullName(), err)
		}
	}
	if len(names) != int(tme.ColumnCount) {
		return nil, fmt.Errorf("table %s: the binlog row has %d columns but the schema read from the source has %d; set binlog_row_metadata=FULL so column names come with each row",
			t.FullName(), tme.ColumnCount, len(names))
	}
	pos := map[string]int{}
	for i, n := range names {
		pos[strings.ToLower(n)] = i
	}
	unsignedMap := tme.UnsignedMap()
	lay := &layout{tme: tme}
	for _, col := range neededColumns(t) {
		i, ok := pos[strings.ToLower(col)]
		if !ok {
			// A mapped column the table no longer has: the value is NULL
			// for this row, and routing reports it (never a crash).
			continue
		}
		lay.names = append(lay.names, col)
		lay.idx = append(lay.idx, i)
		lay.unsigned = append(lay.unsigned, unsignedMap[i])
	}
	r.layoutMu.Lock()
	r.layouts[key] = lay
	r.layoutMu.Unlock()
	return lay, nil
}

// noteDDL forgets the cached schema of an outbox table a DDL statement
// names, so the next row re-reads it (only matters without FULL metadata).
func (r *Reader) noteDDL(schema, query string) {
	if r.schemas == nil {
		return
	}
	q := strings.ToLower(query)
	for key, t := range r.tables {
		if strings.Contains(q, strings.ToLower(t.Name)) {
			r.schemas.Forget(t.Schema, t.Name)
			r.layoutMu.Lock()
			delete(r.layouts, key)
			r.layoutMu.Unlock()
		}
	}
}

// SchemaSource gives a table's column names in ordinal order.
type SchemaSource interface {
	Columns(ctx context.Context, schema, table string) ([]string, error)
	Forget(schema, table string)
}

// InfoSchema reads column names from information_schema on the source and
// caches them until Forget.
type InfoSchema struct {
	DB    *sql.DB
	mu    sync.Mutex
	cache map[string][]string
}

// Columns returns the table's columns in ordinal order.
func (s *InfoSchema) Columns(ctx context.Context, schema, table string) ([]string, error) {
	key := tableKey(schema, table)
	s.mu.Lock()
	cols, ok := s.cache[key]
	s.mu.Unlock()
	if ok {
		return cols, nil
	}
	rows, err := s.DB.QueryContext(ctx,
		`SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`,
		schema, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.cache == nil {
		s.cache = map[string][]string{}
	}
	s.cache[key] = cols
	s.mu.Unlock()
	return cols, nil
}

// Forget drops a cached table.
func (s *InfoSchema) Forget(schema, table string) {
	s.mu.Lock()
	delete(s.cache, tableKey(schema, table))
	s.mu.Unlock()
}

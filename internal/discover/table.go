// Package discover proposes how the relay should read an outbox table that
// already exists: it reads the table's columns, indexes and a sample of its
// values on a replica (Describe), recognises one of pkg/outbox's presets or
// maps the table column by column (Propose), and writes the result as a
// commented relay config (Render). It is `binlog-relay init`.
//
// It guesses from names, types, indexes, defaults, comments and the values
// present, and says so: every choice it could not make with confidence is
// returned as a Note, written as a comment in the config and on stderr.
// A table the relay cannot read at all (no primary key, no payload column)
// is an *UnmappableError naming what is missing.
package discover

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
)

// Column is one column as information_schema.COLUMNS describes it.
type Column struct {
	Name string
	// DataType is the bare type, lower case: varchar, bigint, enum, json.
	DataType string
	// ColumnType is the full type as the server writes it: varchar(64),
	// tinyint(1), bigint unsigned, enum('NEW','SENT') (values in their case).
	ColumnType string
	Nullable   bool
	// Default is the column's default as a value (quotes removed), nil
	// when it has none (or it is NULL).
	Default       *string
	AutoIncrement bool
	Comment       string
}

// Index is one index; the primary key is named PRIMARY.
type Index struct {
	Name    string
	Unique  bool
	Columns []string // in index order
}

// Table is what Propose reads: the table's columns in order, its indexes,
// and the distinct values sampled from the columns that may hold a status
// or an epoch time.
type Table struct {
	Schema, Name string
	Columns      []Column
	Indexes      []Index
	// Values holds, by lower-case column name, the distinct values of
	// the most recent rows (sampleRows of them, by primary key), at most
	// maxValues+1 each; a column not sampled is absent. Empty when the
	// table has no rows.
	Values map[string][]string
	// Server is the source's VERSION(), for the config's header.
	Server string
}

const (
	// sampleRows bounds what Describe reads of a column: the most recent
	// rows by primary key, so the cost is the same on a table of a
	// thousand rows and one of a billion.
	sampleRows = 10000
	// maxValues is the most distinct values a status column is expected
	// to hold; more means it is not a status.
	maxValues = 20
)

// ErrNoTable is returned by Describe when the table does not exist or the
// user cannot see it.
var ErrNoTable = errors.New("no such table")

// Describe reads schema.name's columns, indexes and sample values on db
// (a replica: it only reads, a bounded amount).
func Describe(ctx context.Context, db *sql.DB, schema, name string) (*Table, error) {
	for _, n := range []struct{ what, v string }{{"schema", schema}, {"table", name}} {
		if err := ident.Check(n.what, n.v); err != nil {
			return nil, err
		}
	}
	t := &Table{Schema: schema, Name: name, Values: map[string][]string{}}
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&t.Server); err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	err := sqlrows.Each(ctx, db, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA, COLUMN_COMMENT
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`,
		[]any{schema, name}, func(rs *sql.Rows, _ []*sql.ColumnType) error {
			var c Column
			var nullable, extra string
			var def sql.NullString
			if err := rs.Scan(&c.Name, &c.DataType, &c.ColumnType, &nullable, &def, &extra, &c.Comment); err != nil {
				return err
			}
			c.DataType = strings.ToLower(c.DataType)
			c.Nullable = nullable == "YES"
			c.AutoIncrement = strings.Contains(strings.ToLower(extra), "auto_increment")
			c.Default = defaultValue(def)
			t.Columns = append(t.Columns, c)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s.%s: %w", schema, name, err)
	}
	if len(t.Columns) == 0 {
		return nil, fmt.Errorf("%s.%s: %w on the source (or the user cannot see it)", schema, name, ErrNoTable)
	}
	err = sqlrows.Each(ctx, db, `SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX`,
		[]any{schema, name}, func(rs *sql.Rows, _ []*sql.ColumnType) error {
			var idx, col string
			var nonUnique int
			if err := rs.Scan(&idx, &nonUnique, &col); err != nil {
				return err
			}
			if n := len(t.Indexes); n > 0 && t.Indexes[n-1].Name == idx {
				t.Indexes[n-1].Columns = append(t.Indexes[n-1].Columns, col)
				return nil
			}
			t.Indexes = append(t.Indexes, Index{Name: idx, Unique: nonUnique == 0, Columns: []string{col}})
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("reading the indexes of %s.%s: %w", schema, name, err)
	}
	// MariaDB's JSON is LONGTEXT with a json_valid() check: the check says
	// it is JSON. (MySQL has a JSON type, and no TABLE_NAME in this view:
	// the query fails there and is not needed.)
	// https://mariadb.com/kb/en/json-data-type/
	_ = sqlrows.Each(ctx, db, `SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?`,
		[]any{schema, name}, func(rs *sql.Rows, _ []*sql.ColumnType) error {
			var clause string
			if err := rs.Scan(&clause); err != nil {
				return err
			}
			for i, c := range t.Columns {
				if strings.EqualFold(strings.ReplaceAll(clause, " ", ""), "json_valid(`"+c.Name+"`)") {
					t.Columns[i].DataType, t.Columns[i].ColumnType = "json", "json"
				}
			}
			return nil
		})
	for _, c := range t.sampled() {
		vals, err := t.sample(ctx, db, c)
		if err != nil {
			return nil, fmt.Errorf("reading the values of %s.%s.%s: %w", schema, name, c, err)
		}
		t.Values[strings.ToLower(c)] = vals
	}
	return t, nil
}

// defaultValue reads COLUMN_DEFAULT. MariaDB (10.2.7+) gives it as an SQL
// expression: 'PENDING' quoted, NULL as the word; MySQL gives the value
// itself and SQL NULL for none.
// https://mariadb.com/kb/en/information-schema-columns-table/
func defaultValue(d sql.NullString) *string {
	if !d.Valid || d.String == "NULL" {
		return nil
	}
	v := d.String
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
	}
	return &v
}

// sampled are the columns whose values Propose reads: the ones that may be
// the status or an integer creation time.
func (t *Table) sampled() []string {
	var out []string
	for _, c := range t.Columns {
		if statusName(c.Name) > 0 || (createdName(c.Name) > 0 && c.integer()) {
			out = append(out, c.Name)
		}
	}
	return out
}

// sample reads the distinct values of col among the most recent rows, at
// most maxValues+1 (one more says "too many to be a status").
func (t *Table) sample(ctx context.Context, db *sql.DB, col string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	order := ""
	if pk := t.primaryKey(); len(pk) > 0 {
		var keys []string
		for _, k := range pk {
			keys = append(keys, ident.Quote(k)+" DESC")
		}
		order = " ORDER BY " + strings.Join(keys, ", ")
	}
	q := fmt.Sprintf("SELECT DISTINCT v FROM (SELECT %s AS v FROM %s.%s%s LIMIT %d) AS recent WHERE v IS NOT NULL LIMIT %d",
		ident.Quote(col), ident.Quote(t.Schema), ident.Quote(t.Name), order, sampleRows, maxValues+1)
	var out []string
	err := sqlrows.Each(ctx, db, q, nil, func(rs *sql.Rows, _ []*sql.ColumnType) error {
		var v string
		if err := rs.Scan(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// column returns the column named name (case-insensitively).
func (t *Table) column(name string) (Column, bool) {
	for _, c := range t.Columns {
		if strings.EqualFold(c.Name, name) {
			return c, true
		}
	}
	return Column{}, false
}

// primaryKey is the primary key's columns, or nil.
func (t *Table) primaryKey() []string {
	for _, i := range t.Indexes {
		if i.Name == "PRIMARY" {
			return i.Columns
		}
	}
	return nil
}

// uniqueAlone returns the name of a unique index (or PRIMARY) whose only
// column is col, or "".
func (t *Table) uniqueAlone(col string) string {
	for _, i := range t.Indexes {
		if i.Unique && len(i.Columns) == 1 && strings.EqualFold(i.Columns[0], col) {
			return i.Name
		}
	}
	return ""
}

// keyColumn reports whether col alone names a row: the primary key, or
// a unique NOT NULL column.
func (t *Table) keyColumn(col string) bool {
	c, ok := t.column(col)
	if !ok {
		return false
	}
	for _, i := range t.Indexes {
		if i.Unique && len(i.Columns) == 1 && strings.EqualFold(i.Columns[0], col) && (i.Name == "PRIMARY" || !c.Nullable) {
			return true
		}
	}
	return false
}

// integer reports an integer column (BOOLEAN is TINYINT(1)).
func (c Column) integer() bool {
	switch c.DataType {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		return true
	}
	return false
}

// textual reports a column holding text or bytes that can carry a payload
// or a name: not an ENUM or SET, which hold a fixed list.
func (c Column) textual() bool {
	switch c.DataType {
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json",
		"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		return true
	}
	return false
}

// large reports a column meant for a document: TEXT, BLOB or JSON.
func (c Column) large() bool {
	return c.textual() && c.DataType != "char" && c.DataType != "varchar" && c.DataType != "binary" && c.DataType != "varbinary"
}

// temporal reports a DATETIME or TIMESTAMP column.
func (c Column) temporal() bool {
	return c.DataType == "datetime" || c.DataType == "timestamp"
}

// enumValues are the values of an ENUM column, in order.
func (c Column) enumValues() []string {
	if c.DataType != "enum" {
		return nil
	}
	body := c.ColumnType
	if i := strings.IndexByte(body, '('); i >= 0 {
		body = strings.TrimSuffix(body[i+1:], ")")
	}
	var out []string
	for i := 0; i < len(body); i++ {
		if body[i] != '\'' {
			continue
		}
		var b strings.Builder
		for i++; i < len(body); i++ {
			if body[i] == '\'' {
				if i+1 < len(body) && body[i+1] == '\'' { // '' is a quote
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			b.WriteByte(body[i])
		}
		out = append(out, b.String())
	}
	return out
}

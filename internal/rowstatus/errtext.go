package rowstatus

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// maxReason caps the error text whatever the column holds: a reason is a
// line, not a dump.
const maxReason = 1000

// columnLimit is what the error column takes: characters (VARCHAR(n)
// counts characters) and bytes (TEXT counts bytes), as information_schema
// gives them.
type columnLimit struct{ chars, bytes int }

// errorLimits reads and caches each table's error column limits. Under
// strict SQL mode a value longer than the column is refused, and a refused
// status write would be retried forever; so the text is cut to fit.
type errorLimits struct {
	mu     sync.Mutex
	limits map[*outbox.Table]columnLimit
}

// LoadErrorLimits reads the error column's length of each table from the
// server's information_schema. Tables it could not read are read again at
// their first failed publish.
func (w *Writer) LoadErrorLimits(ctx context.Context, tables []*outbox.Table) error {
	for _, t := range tables {
		if t.Columns.Error == "" {
			continue
		}
		if _, err := w.errorLimit(ctx, t); err != nil {
			return fmt.Errorf("reading the length of %s.%s: %w", t.FullName(), t.Columns.Error, err)
		}
	}
	return nil
}

// errorLimit returns the table's error column limit, read once.
func (w *Writer) errorLimit(ctx context.Context, t *outbox.Table) (columnLimit, error) {
	w.limits.mu.Lock()
	l, ok := w.limits.limits[t]
	w.limits.mu.Unlock()
	if ok {
		return l, nil
	}
	var chars, bytes sql.NullInt64
	err := w.DB.QueryRowContext(ctx, `SELECT CHARACTER_MAXIMUM_LENGTH, CHARACTER_OCTET_LENGTH FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?`, t.Schema, t.Name, t.Columns.Error).Scan(&chars, &bytes)
	if err == sql.ErrNoRows {
		err = nil // no such column: the write reports it; cut to the cap meanwhile
	}
	if err != nil {
		return columnLimit{maxReason, maxReason}, err
	}
	l = columnLimit{chars: maxReason, bytes: maxReason}
	if chars.Valid && chars.Int64 < int64(l.chars) {
		l.chars = int(chars.Int64)
	}
	if bytes.Valid && bytes.Int64 < int64(l.bytes) {
		l.bytes = int(bytes.Int64)
	}
	w.limits.mu.Lock()
	if w.limits.limits == nil {
		w.limits.limits = map[*outbox.Table]columnLimit{}
	}
	w.limits.limits[t] = l
	w.limits.mu.Unlock()
	return l, nil
}

// FitError cuts s to what the table's error column takes, on a UTF-8
// boundary. When the limit cannot be read it cuts to the relay's cap and
// the write goes ahead (the next failure reads the limit again).
func (w *Writer) FitError(ctx context.Context, t *outbox.Table, s string) string {
	l, _ := w.errorLimit(ctx, t)
	return fit(s, l)
}

// fit keeps the longest prefix of s with at most l.chars characters and
// l.bytes bytes, ending on a character boundary. Invalid UTF-8 counts one
// byte per character, as the server would refuse it anyway.
func fit(s string, l columnLimit) string {
	chars, end := 0, 0
	for end < len(s) {
		_, size := utf8.DecodeRuneInString(s[end:])
		if chars+1 > l.chars || end+size > l.bytes {
			break
		}
		chars++
		end += size
	}
	return s[:end]
}

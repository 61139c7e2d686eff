package rowstatus

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/go-sql-driver/mysql"
)

// A SENT mark changes three small columns of rows that hold a payload.
// Under binlog_row_image=FULL the primary logs each marked row twice in
// full, payload included; the replica receives, applies and stores all of
// it. The marking session can log a minimal image instead (the key before,
// the changed columns after): `SET SESSION binlog_row_image = MINIMAL`,
// which takes SESSION_VARIABLES_ADMIN (or SYSTEM_VARIABLES_ADMIN, or SUPER)
// on MySQL and BINLOG ADMIN (or SUPER, up to 11.x) on MariaDB.
//
// Only the marks use it: the retry bookkeeping puts rows back to pending,
// and a row put back must reach the binlog reader with its whole image (a
// re-queue). Replicas log what they apply with their own binlog_row_image,
// so a source replica at FULL (which the start-up check asks for) still
// gives the reader whole images of the marks; a reader on a source that
// logs them minimal tells them by their status (pkg/binlog).

// Mark row images.
const (
	ImageMinimal = "minimal"
	ImageFull    = "full"
)

// markSession is the one connection the marks run on, with its session's
// binlog_row_image set once.
type markSession struct {
	mu   sync.Mutex
	conn *sql.Conn
	// refused is the server's answer when the session could not log
	// minimal images (a missing grant): the marks run FULL on the pool.
	refused error
}

// erSpecificAccessDenied is ER_SPECIFIC_ACCESS_DENIED_ERROR: "Access denied;
// you need (at least one of) the ... privilege(s) for this operation".
const erSpecificAccessDenied = 1227

// ErrMinimalRefused wraps the server's refusal of a minimal mark image.
var ErrMinimalRefused = errors.New("binlog_row_image=MINIMAL refused for the marks' session")

// MarkImage reports the image the marks are logged with: minimal, or full
// with why (nil when full was asked for). It opens the marks' session if
// it is not open yet.
func (w *Writer) MarkImage(ctx context.Context) (string, error) {
	if w.Image != ImageMinimal {
		return ImageFull, nil
	}
	w.session.mu.Lock()
	defer w.session.mu.Unlock()
	if _, err := w.session.open(ctx, w.DB); err != nil {
		return ImageFull, err
	}
	if w.session.refused != nil {
		return ImageFull, w.session.refused
	}
	return ImageMinimal, nil
}

// execMark runs a SENT mark: on the minimal-image session when asked for
// and granted, on the pool otherwise.
func (w *Writer) execMark(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if w.Image != ImageMinimal {
		return w.DB.ExecContext(ctx, q, args...)
	}
	w.session.mu.Lock()
	defer w.session.mu.Unlock()
	conn, err := w.session.open(ctx, w.DB)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return w.DB.ExecContext(ctx, q, args...)
	}
	res, err := conn.ExecContext(ctx, q, args...)
	if err != nil {
		// A broken connection, a killed query: the next mark opens a new
		// session (and sets its image again).
		w.session.close()
	}
	return res, err
}

// open returns the session's connection, opening it and setting its image
// if needed; nil (and no error) when the server refused the image.
func (s *markSession) open(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	if s.refused != nil {
		return nil, nil
	}
	if s.conn != nil {
		return s.conn, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening the marks' session: %w", err)
	}
	_, err = conn.ExecContext(ctx, "SET SESSION binlog_row_image = 'MINIMAL'")
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erSpecificAccessDenied {
		_ = conn.Close()
		s.refused = fmt.Errorf("%w: %s", ErrMinimalRefused, me.Message)
		return nil, nil
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("setting the marks' session to binlog_row_image=MINIMAL: %w", err)
	}
	// MariaDB also logs each statement's text beside its row events
	// (binlog_annotate_row_events, ON by default), and replicas pass it on:
	// a mark names 1,000 ids and message ids, some 40 KB of text, more than
	// its minimal rows. The same grant lets the session turn it off; MySQL
	// has no such variable (its binlog_rows_query_log_events is off by
	// default) and refuses the statement, which changes nothing.
	_, _ = conn.ExecContext(ctx, "SET SESSION binlog_annotate_row_events = OFF")
	s.conn = conn
	return conn, nil
}

func (s *markSession) close() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// Close releases the marks' session.
func (w *Writer) Close() error {
	w.session.mu.Lock()
	defer w.session.mu.Unlock()
	w.session.close()
	return nil
}

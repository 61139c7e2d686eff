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

// markSessions are the connections the marks run on, each with its
// session's binlog_row_image set once (openMarkSession); a writer keeps up
// to Sessions of them (one per table marked at once). Idle ones wait in
// idle, and the server's refusal of a minimal image is remembered for all.
type markSessions struct {
	mu   sync.Mutex
	idle []*sql.Conn
	// refused is the server's answer when a session could not log
	// minimal images (a missing grant): the marks run FULL on the pool.
	refused error
	// slots holds one token per mark running: at most Sessions at once.
	slots chan struct{}
	// closed: the writer was closed, a session given back is closed too.
	closed bool
}

// erSpecificAccessDenied is ER_SPECIFIC_ACCESS_DENIED_ERROR: "Access denied;
// you need (at least one of) the ... privilege(s) for this operation".
const erSpecificAccessDenied = 1227

// ErrMinimalRefused wraps the server's refusal of a minimal mark image.
var ErrMinimalRefused = errors.New("binlog_row_image=MINIMAL refused for the marks' session")

// MarkImage reports the image the marks are logged with: minimal, or full
// with why (nil when full was asked for). It opens a marks' session if
// none is open yet.
func (w *Writer) MarkImage(ctx context.Context) (string, error) {
	if w.Image != ImageMinimal {
		return ImageFull, nil
	}
	s, err := w.takeSession(ctx)
	if err != nil {
		return ImageFull, err
	}
	w.putSession(s, nil)
	if refused := w.refused(); refused != nil {
		return ImageFull, refused
	}
	return ImageMinimal, nil
}

// execMark runs a SENT mark: on a minimal-image session when asked for
// and granted, on the pool otherwise.
func (w *Writer) execMark(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if w.Image != ImageMinimal {
		return w.DB.ExecContext(ctx, q, args...)
	}
	s, err := w.takeSession(ctx)
	if err != nil {
		return nil, err
	}
	if s == nil {
		w.putSession(nil, nil)
		return w.DB.ExecContext(ctx, q, args...)
	}
	res, err := s.ExecContext(ctx, q, args...)
	// A broken connection, a killed query: putSession closes the session,
	// and the next mark opens a new one (and sets its image again).
	w.putSession(s, err)
	return res, err
}

// sessions returns the writer's session pool, made on first use.
func (w *Writer) sessions() *markSessions {
	w.once.Do(func() {
		w.pool = &markSessions{slots: make(chan struct{}, max(w.Sessions, 1))}
	})
	return w.pool
}

func (w *Writer) refused() error {
	p := w.sessions()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// takeSession takes a slot (waiting while Sessions marks run) and returns
// an idle session, or opens one; nil (and no error) when the server
// refused the minimal image. The caller gives the slot back with
// putSession.
func (w *Writer) takeSession(ctx context.Context) (*sql.Conn, error) {
	p := w.sessions()
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	if p.refused != nil {
		p.mu.Unlock()
		return nil, nil
	}
	if n := len(p.idle); n > 0 {
		s := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return s, nil
	}
	p.mu.Unlock()
	conn, refused, err := openMarkSession(ctx, w.DB)
	if refused != nil {
		p.mu.Lock()
		p.refused = refused
		p.mu.Unlock()
		return nil, nil
	}
	if err != nil {
		<-p.slots
		return nil, err
	}
	return conn, nil
}

// putSession gives back what takeSession took: the session goes back to
// idle, or is closed when its statement failed.
func (w *Writer) putSession(s *sql.Conn, err error) {
	p := w.sessions()
	if s != nil {
		p.mu.Lock()
		if err != nil || p.closed {
			_ = s.Close()
		} else {
			p.idle = append(p.idle, s)
		}
		p.mu.Unlock()
	}
	<-p.slots
}

// openMarkSession opens a connection and sets its image; refused is the
// server's refusal of the image (the connection is closed then).
func openMarkSession(ctx context.Context, db *sql.DB) (conn *sql.Conn, refused, err error) {
	conn, err = db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the marks' session: %w", err)
	}
	_, err = conn.ExecContext(ctx, "SET SESSION binlog_row_image = 'MINIMAL'")
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erSpecificAccessDenied {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: %s", ErrMinimalRefused, me.Message), nil
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("setting the marks' session to binlog_row_image=MINIMAL: %w", err)
	}
	// MariaDB also logs each statement's text beside its row events
	// (binlog_annotate_row_events, ON by default), and replicas pass it on:
	// a mark names 1,000 ids and message ids, some 40 KB of text, more than
	// its minimal rows. The same grant lets the session turn it off; MySQL
	// has no such variable (its binlog_rows_query_log_events is off by
	// default) and refuses the statement, which changes nothing.
	_, _ = conn.ExecContext(ctx, "SET SESSION binlog_annotate_row_events = OFF")
	return conn, nil, nil
}

// Close releases the marks' sessions; one in use is closed when its
// statement ends.
func (w *Writer) Close() error {
	p := w.sessions()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.idle {
		_ = s.Close()
	}
	p.idle, p.closed = nil, true
	return nil
}

package inbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
)

// store holds the SQL of a state inbox table (consumer_message) for one consumer,
// with the columns its mapping names. Every timestamp comes from the database clock
// (NOW(3)), so processes with skewed clocks agree on what is due.
type store struct {
	db       *sql.DB
	m        mapping
	table    string // quoted
	consumer string
}

func newStore(db *sql.DB, m mapping, consumer string) store {
	return store{db: db, m: m, table: q(m.Table), consumer: consumer}
}

// c quotes the column of a Columns field.
func (s *store) c(col string) string { return q(col) }

// key is the WHERE condition selecting this consumer's row of a message id, and
// keyArgs its arguments: the consumer column is left out when the table has none
// (one consumer per table).
func (s *store) key() string {
	if s.m.Columns.Consumer != "" {
		return q(s.m.Columns.Consumer) + " = ? AND " + q(s.m.Columns.MessageID) + " = ?"
	}
	return q(s.m.Columns.MessageID) + " = ?"
}

func (s *store) keyArgs(messageID string) []any {
	if s.m.Columns.Consumer != "" {
		return []any{s.consumer, messageID}
	}
	return []any{messageID}
}

// mine is the WHERE condition selecting this consumer's rows, with its arguments.
func (s *store) mine() (string, []any) {
	if s.m.Columns.Consumer != "" {
		return q(s.m.Columns.Consumer) + " = ? AND ", []any{s.consumer}
	}
	return "", nil
}

// insert builds an INSERT of the given column/value pairs, leaving out the columns
// the table does not have (an empty name). A value is a placeholder's argument, or
// an sqlExpr written as is with its own arguments.
func (s *store) insert(pairs ...any) (string, []any) {
	var cols, vals []string
	var args []any
	for i := 0; i+1 < len(pairs); i += 2 {
		col := pairs[i].(string)
		if col == "" {
			continue
		}
		cols = append(cols, q(col))
		if e, ok := pairs[i+1].(sqlExpr); ok {
			vals = append(vals, e.sql)
			args = append(args, e.args...)
			continue
		}
		vals = append(vals, "?")
		args = append(args, pairs[i+1])
	}
	return "INSERT INTO " + s.table + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")", args
}

// sqlExpr is SQL text in an insert, with the arguments of its placeholders.
type sqlExpr struct {
	sql  string
	args []any
}

var now3 = sqlExpr{sql: "NOW(3)"}

// rowState is the part of a row that decides what a delivery does.
type rowState struct {
	id            int64
	status        string
	retryCount    int
	maxRetryCount int
	version       int
	errorMsg      string
}

// errVersionConflict means a version-checked update matched no row: someone else
// changed the row since it was read.
var errVersionConflict = errors.New("inbox row changed concurrently (version mismatch)")

// errRowVanished means a duplicate-key error pointed at a row that a later read could
// not find (purged in between). The attempt is simply run again.
var errRowVanished = errors.New("inbox row vanished between insert and read")

// errUnrecorded marks the error of a handler that ran and failed but whose failure
// could not be recorded (the record deadlocked every time, or the database went
// away). It is never transient: running the delivery's transaction again would run
// the handler again at once, a second time for one delivery and without the
// failure's backoff. The delivery is requeued instead, like any database failure.
var errUnrecorded = errors.New("handler failure not recorded")

// unrecorded marks err (if any) with errUnrecorded.
func unrecorded(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errUnrecorded, err)
}

const maxErrorMsgLen = 1024

// retryDelayArg is the argument of "NOW(3) + INTERVAL ? MICROSECOND" for a row entering
// status: NULL unless the row will be retried, because NOW() + INTERVAL NULL is NULL and
// next_retry_time stays empty on rows that are never retried.
func retryDelayArg(status string, d time.Duration) any {
	if status != StatusPendingRetry {
		return nil
	}
	return d.Microseconds()
}

// insertSuccess is the first-delivery write: the row is SUCCESS from the start and
// only becomes visible if the handler's work commits with it. A concurrent copy of the
// message blocks on the unique key until this transaction ends.
func (s *store) insertSuccess(ctx context.Context, tx *sql.Tx, m Message, maxRetries int) error {
	c := s.m.Columns
	query, args := s.insert(c.Consumer, s.consumer, c.MessageID, m.ID, c.Status, StatusSuccess,
		c.Content, nonNil(m.Body), c.ContentType, m.ContentType, c.Headers, encodeHeaders(m.Headers),
		c.Exchange, m.Exchange, c.RoutingKey, m.RoutingKey,
		c.RetryCount, 0, c.MaxRetryCount, maxRetries, c.FirstConsumeTime, now3,
		c.LastConsumeTime, now3, c.SuccessTime, now3)
	_, err := tx.ExecContext(ctx, query, args...)
	return err
}

// insertFailure records a message whose first attempt failed, or which was rejected
// before any attempt (no usable message id).
func (s *store) insertFailure(ctx context.Context, tx *sql.Tx, m Message, id, status string,
	delay time.Duration, errMsg string, maxRetries int) error {
	c := s.m.Columns
	query, args := s.insert(c.Consumer, s.consumer, c.MessageID, id, c.Status, status,
		c.Content, nonNil(m.Body), c.ContentType, m.ContentType, c.Headers, encodeHeaders(m.Headers),
		c.Exchange, m.Exchange, c.RoutingKey, m.RoutingKey,
		c.RetryCount, 0, c.MaxRetryCount, maxRetries, c.NextRetryTime, sqlExpr{"NOW(3) + INTERVAL ? MICROSECOND", []any{retryDelayArg(status, delay)}},
		c.Error, errMsg, c.FirstConsumeTime, now3, c.LastConsumeTime, now3)
	_, err := tx.ExecContext(ctx, query, args...)
	return err
}

// lockRow reads the row of messageID and locks it until tx ends.
func (s *store) lockRow(ctx context.Context, tx *sql.Tx, messageID string) (rowState, bool, error) {
	return s.row(ctx, tx, messageID, " FOR UPDATE")
}

// readRow reads the row of messageID without locking it (a consistent read).
func (s *store) readRow(ctx context.Context, tx *sql.Tx, messageID string) (rowState, bool, error) {
	return s.row(ctx, tx, messageID, "")
}

func (s *store) row(ctx context.Context, tx *sql.Tx, messageID, lock string) (rowState, bool, error) {
	c := s.m.Columns
	var r rowState
	var errMsg sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT `+list(c.ID, c.Status, c.RetryCount, c.MaxRetryCount, c.Version, c.Error)+`
		FROM `+s.table+` WHERE `+s.key()+lock,
		s.keyArgs(messageID)...).Scan(&r.id, &r.status, &r.retryCount, &r.maxRetryCount, &r.version, &errMsg)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	r.errorMsg = errMsg.String
	return r, true, nil
}

// markSuccess turns a RETRYING row SUCCESS after its handler ran again.
func (s *store) markSuccess(ctx context.Context, tx *sql.Tx, r rowState) error {
	c := s.m.Columns
	res, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s
		SET %s = 'SUCCESS', %s = NOW(3), %s = NOW(3), %s = NULL, %[6]s = %[6]s + 1
		WHERE %s = ? AND %[6]s = ?`, s.table, q(c.Status), q(c.SuccessTime), q(c.LastConsumeTime),
		q(c.NextRetryTime), q(c.Version), q(c.ID)), r.id, r.version)
	return checkOne(res, err)
}

// updateFailure records a failed retry: PENDING_RETRY after delay, or FAILED.
func (s *store) updateFailure(ctx context.Context, tx *sql.Tx, r rowState, status string,
	delay time.Duration, errMsg string) error {
	c := s.m.Columns
	res, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s
		SET %s = ?, %s = NOW(3) + INTERVAL ? MICROSECOND, %s = ?, %s = NOW(3), %[6]s = %[6]s + 1
		WHERE %s = ? AND %[6]s = ?`, s.table, q(c.Status), q(c.NextRetryTime), q(c.Error),
		q(c.LastConsumeTime), q(c.Version), q(c.ID)),
		status, retryDelayArg(status, delay), errMsg, r.id, r.version)
	return checkOne(res, err)
}

// execTx runs one statement in a transaction of its own and commits it. The inbox
// never leaves a write to autocommit: on a pool whose DSN sets autocommit=0 a bare
// statement's change would stay uncommitted, holding its row locks, on a connection
// back in the pool (until that connection's next BEGIN commits it).
func (s *store) execTx(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return res, tx.Commit()
}

func checkOne(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return errVersionConflict
	}
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// isDuplicateKey reports MySQL error 1062 (ER_DUP_ENTRY).
func isDuplicateKey(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// isTransient reports errors after which InnoDB has rolled the transaction back (or
// will, if asked) and running it again is the cure: deadlock (1213) and lock wait
// timeout (1205). Not after the handler ran and failed (errUnrecorded).
func isTransient(err error) bool {
	if errors.Is(err, errUnrecorded) {
		return false
	}
	if errors.Is(err, errRowVanished) {
		return true
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// isTooLarge reports a statement bigger than max_allowed_packet: refused by the driver
// before sending (DSN maxAllowedPacket=0 makes it use the server's limit) or by the
// server (1153 ER_NET_PACKET_TOO_LARGE, 1301 ER_WARN_ALLOWED_PACKET_OVERFLOWED).
func isTooLarge(err error) bool {
	if errors.Is(err, mysql.ErrPktTooLarge) {
		return true
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1153 || me.Number == 1301)
}

// errorText is what goes into error_msg: valid UTF-8 (the column is utf8mb4 and a
// strict server refuses invalid bytes) and no longer than the column.
func errorText(err error) string {
	return truncateUTF8(strings.ToValidUTF8(err.Error(), "?"), maxErrorMsgLen)
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// idProblem says why a message id cannot key a row, or "" if it can.
func idProblem(id string, maxLen int) string {
	switch {
	case id == "":
		return "message has no message id"
	case len(id) > maxLen:
		return fmt.Sprintf("message id is %d bytes, longer than %d", len(id), maxLen)
	case !utf8.ValidString(id):
		return "message id is not valid UTF-8"
	}
	return ""
}

// derivedID keys the FAILED row of a message whose own id is unusable. It is a hash of
// the delivery, so a redelivery of the same message finds the same row instead of
// adding one per delivery.
func derivedID(m Message) string {
	h := sha256.New()
	for _, part := range []string{m.ID, m.Exchange, m.RoutingKey} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	h.Write(m.Body)
	return "invalid-id:" + hex.EncodeToString(h.Sum(nil))[:40]
}

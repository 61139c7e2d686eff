package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
)

// Processing log statuses (t_message_log).
const (
	LogProcessing = "PROCESSING" // failed at least once; the broker redelivers it
	LogSuccess    = "SUCCESS"
	LogFailed     = "FAILED"
)

// errRequeue marks a failed handler on a dedup table: with no body stored there is
// nothing to republish from, so the delivery goes back to the broker.
var errRequeue = errors.New("requeued for another attempt")

// processDedup handles a message against a dedup table (t_msg_dedup): the
// handler's work and the message id's row commit in one transaction, so a
// duplicate finds the row and is ACKed without work, and a failed handler leaves
// nothing behind. With a processing log the attempts are counted there, and a
// message out of retries is FAILED (ACKed, with its error) instead of requeued.
func (in *Inbox) processDedup(ctx context.Context, m Message) (Outcome, error) {
	if reason := idProblem(m.ID, in.st.m.MessageIDLen); reason != "" {
		// No row can key it: requeueing would loop forever.
		in.log.Error("message dropped: it cannot be deduplicated", in.fields(m, slog.String("reason", reason))...)
		return Failed, nil
	}
	if in.dedup.seen(ctx, m.ID) {
		return Duplicate, nil
	}
	return in.runTx(ctx, m, in.attemptDedup)
}

func (in *Inbox) attemptDedup(ctx context.Context, m Message, last bool) (Outcome, error) {
	c, lc := in.st.m.Columns, in.st.m.LogColumns
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("beginning inbox transaction for message %s: %w", m.ID, err)
	}
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `INSERT INTO `+in.st.table+` (`+list(c.MessageID, c.CreatedAt)+`) VALUES (?, NOW())`, m.ID)
	if isDuplicateKey(err) {
		// The insert waited for any transaction holding the key: the message was
		// handled and committed.
		in.dedup.markDone(ctx, m.ID)
		in.logDuplicate(m, rowState{status: LogSuccess})
		return Duplicate, nil
	}
	if err != nil {
		return 0, fmt.Errorf("inserting dedup row for message %s: %w", m.ID, err)
	}
	if in.st.m.LogTable != "" {
		var st string
		err := tx.QueryRowContext(ctx, `SELECT `+q(lc.Status)+` FROM `+q(in.st.m.LogTable)+` WHERE `+q(lc.MessageID)+` = ? FOR UPDATE`, m.ID).Scan(&st)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("reading the processing log of message %s: %w", m.ID, err)
		}
		if st == LogFailed {
			in.logDuplicate(m, rowState{status: LogFailed})
			return Duplicate, nil // gave up on it before: no more work
		}
	}
	if herr := in.runHandler(ctx, tx, m); herr != nil {
		_ = tx.Rollback()
		if ctx.Err() != nil {
			return 0, fmt.Errorf("handling message %s: %w", m.ID, ctx.Err())
		}
		if isTransient(herr) && !last {
			return 0, herr
		}
		return in.dedupFailed(ctx, m, herr)
	}
	if in.st.m.LogTable != "" {
		if err := in.writeLog(ctx, tx, m, LogSuccess, 0, ""); err != nil {
			return 0, fmt.Errorf("logging success of message %s: %w", m.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("committing dedup row and handler work for message %s: %w", m.ID, err)
	}
	in.dedup.markDone(ctx, m.ID)
	return Processed, nil
}

// dedupFailed records a failed attempt in the processing log, if there is one, and
// says whether the broker should deliver the message again. A record that fails is
// marked unrecorded: the handler ran, so its transaction is not run again at once
// (a deadlock of the log's upsert would otherwise run the handler a second time,
// uncounted); the delivery is requeued.
func (in *Inbox) dedupFailed(ctx context.Context, m Message, herr error) (Outcome, error) {
	msg := errorText(herr)
	malformed := errors.Is(herr, ErrMalformed)
	if in.st.m.LogTable == "" {
		if malformed {
			in.log.Error("malformed message dropped (no processing log to record it in)", in.fields(m, slog.String("error", msg))...)
			return Failed, nil
		}
		return 0, fmt.Errorf("handling message %s: %s: %w", m.ID, msg, errRequeue)
	}
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, unrecorded(fmt.Errorf("beginning failure record for message %s: %w", m.ID, err))
	}
	defer func() { _ = tx.Rollback() }()
	if err := in.writeLog(ctx, tx, m, LogProcessing, in.cfg.MaxRetries, msg); err != nil {
		return 0, unrecorded(fmt.Errorf("recording failure of message %s: %w", m.ID, err))
	}
	var status string
	var retries int
	lc := in.st.m.LogColumns
	if malformed {
		if _, err := tx.ExecContext(ctx, `UPDATE `+q(in.st.m.LogTable)+` SET `+q(lc.Status)+` = 'FAILED' WHERE `+q(lc.MessageID)+` = ?`, m.ID); err != nil {
			return 0, unrecorded(fmt.Errorf("recording malformed message %s: %w", m.ID, err))
		}
	}
	if err := tx.QueryRowContext(ctx, `SELECT `+list(lc.Status, lc.RetryCount)+` FROM `+q(in.st.m.LogTable)+` WHERE `+q(lc.MessageID)+` = ?`, m.ID).Scan(&status, &retries); err != nil {
		return 0, unrecorded(fmt.Errorf("reading the processing log of message %s: %w", m.ID, err))
	}
	if err := tx.Commit(); err != nil {
		return 0, unrecorded(fmt.Errorf("committing failure record of message %s: %w", m.ID, err))
	}
	fields := in.fields(m, slog.String("status", status), slog.Int("retry_count", retries), slog.String("error", msg))
	if status == LogFailed {
		in.log.Warn("message FAILED", fields...)
		return Failed, nil
	}
	in.log.Info("handler failed; requeued", fields...)
	return 0, fmt.Errorf("handling message %s (attempt %d): %s: %w", m.ID, retries, msg, errRequeue)
}

// writeLog upserts the message's processing-log row. For a failure (status
// PROCESSING) it counts the attempt and turns FAILED once more than maxRetries
// attempts failed; SUCCESS is written in the handler's transaction.
func (in *Inbox) writeLog(ctx context.Context, tx *sql.Tx, m Message, status string, maxRetries int, errMsg string) error {
	lc := in.st.m.LogColumns
	cols := []string{lc.MessageID, lc.Topic, lc.Status, lc.RetryCount, lc.CreatedAt}
	vals := "?, ?, ?, ?, NOW()"
	first := status
	attempts := 0
	if status == LogProcessing {
		attempts = 1
		if attempts > maxRetries {
			first = LogFailed
		}
	}
	args := []any{m.ID, m.Exchange, first, attempts}
	var set string
	if status == LogProcessing {
		// Assignments run left to right: the count first (not past a FAILED
		// row: a second copy of the message in flight when the last attempt
		// failed must not count another), then the status on the new count.
		set = fmt.Sprintf("%[2]s = IF(%[1]s = 'FAILED', %[2]s, %[2]s + 1), %[1]s = IF(%[1]s = 'FAILED' OR %[2]s > ?, 'FAILED', 'PROCESSING')",
			q(lc.Status), q(lc.RetryCount))
	} else {
		set = q(lc.Status) + " = 'SUCCESS'"
	}
	var setArgs []any
	if status == LogProcessing {
		setArgs = append(setArgs, maxRetries)
	}
	if lc.Tag != "" {
		cols, vals, args = append(cols, lc.Tag), vals+", ?", append(args, m.RoutingKey)
	}
	if lc.Error != "" && errMsg != "" {
		cols, vals, args = append(cols, lc.Error), vals+", ?", append(args, errMsg)
		set += ", " + q(lc.Error) + " = ?"
		setArgs = append(setArgs, errMsg)
	}
	if lc.UpdatedAt != "" {
		cols, vals = append(cols, lc.UpdatedAt), vals+", NOW()"
		set += ", " + q(lc.UpdatedAt) + " = NOW()"
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO `+q(in.st.m.LogTable)+` (`+list(cols...)+`) VALUES (`+vals+`)
		ON DUPLICATE KEY UPDATE `+set, append(args, setArgs...)...)
	return err
}

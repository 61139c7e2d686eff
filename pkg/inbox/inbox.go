package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// orDiscard is the logger a constructor keeps: log, or one that writes
// nothing when log is nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// txAttempts is how often one delivery's transaction is run when InnoDB reports a
// deadlock or lock wait timeout; after that the error is handled like any other.
const txAttempts = 3

// Inbox decides what one message does against consumer_message. It knows nothing of
// AMQP: the Consumer feeds it deliveries and ACKs whatever Outcome it returns. An
// error return means nothing durable is known; the delivery must be requeued, not
// ACKed.
type Inbox struct {
	cfg     Config
	db      *sql.DB
	st      store
	handler Handler
	dedup   *dedupGuard
	metrics Metrics
	log     *slog.Logger
	// fromHeaders build the handler's context from the headers (headers.go).
	fromHeaders []ContextFromHeaders
}

func newInbox(cfg Config, db *sql.DB, h Handler, dedup DedupStore, m Metrics, log *slog.Logger) *Inbox {
	if m == nil {
		m = NopMetrics{}
	}
	return &Inbox{
		cfg: cfg, db: db, handler: h, metrics: m, log: log,
		st:    newStore(db, cfg.mapping(), cfg.ConsumerName),
		dedup: newDedupGuard(dedup, cfg, log),
	}
}

// Process handles one message and reports what was made durable.
func (in *Inbox) Process(ctx context.Context, m Message) (Outcome, error) {
	start := time.Now()
	out, err := in.process(ctx, m)
	if err == nil {
		recordOutcome(in.metrics, out, time.Since(start))
	}
	return out, err
}

func (in *Inbox) process(ctx context.Context, m Message) (Outcome, error) {
	if in.st.m.Kind == KindDedup {
		return in.processDedup(ctx, m)
	}
	if reason := idProblem(m.ID, in.st.m.MessageIDLen); reason != "" {
		return in.reject(ctx, m, derivedID(m), reason, true)
	}
	if in.dedup.seen(ctx, m.ID) {
		return Duplicate, nil
	}
	return in.runTx(ctx, m, in.attempt)
}

// runTx runs a delivery's transaction, attempt, up to txAttempts times
// while it fails with a transient error; last is set on the final run, which
// handles such an error like any other.
func (in *Inbox) runTx(ctx context.Context, m Message, attempt func(ctx context.Context, m Message, last bool) (Outcome, error)) (Outcome, error) {
	var err error
	for i := 1; i <= txAttempts; i++ {
		var out Outcome
		out, err = attempt(ctx, m, i == txAttempts)
		if err == nil || !isTransient(err) || ctx.Err() != nil {
			return out, err
		}
		in.log.Debug("inbox transaction hit a transient error; running it again",
			slog.String("message_id", m.ID), slog.Int("attempt", i), slog.Any("error", err))
		if werr := transientPause(ctx, i); werr != nil {
			return 0, err
		}
	}
	return 0, err
}

// transientPause waits before running a transaction again after a deadlock
// or lock wait timeout: 10 ms, then 20 ms, 40 ms... (up to 640 ms), each with
// up to as much again of random jitter, so workers that deadlocked on one
// hot row do not collide again in step. "b plus up to b" is 1.5b +/- a
// third, hence the figures below.
func transientPause(ctx context.Context, attempt int) error {
	return backoff.Sleep(ctx, transientBackoff.Delay(attempt-1))
}

var transientBackoff = backoff.Backoff{Initial: 15 * time.Millisecond, Max: 960 * time.Millisecond, Jitter: 1.0 / 3}

// attempt is the first-delivery flow: insert the row as SUCCESS and run the handler in
// the same transaction. The row is never written before the handler's work can commit
// with it, so a failing handler cannot leave a "done" mark behind.
func (in *Inbox) attempt(ctx context.Context, m Message, last bool) (Outcome, error) {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("beginning inbox transaction for message %s: %w", m.ID, err)
	}
	err = in.st.insertSuccess(ctx, tx, m, in.cfg.MaxRetries)
	if isDuplicateKey(err) {
		// The insert waited for any transaction holding the key, so the row is
		// committed: find out what it says.
		_ = tx.Rollback()
		return in.existing(ctx, m, last)
	}
	if err != nil {
		_ = tx.Rollback()
		if isTooLarge(err) {
			// Requeueing would loop forever: the row can never be written.
			return in.reject(ctx, m, m.ID, fmt.Sprintf(
				"message body of %d bytes exceeds the database's max_allowed_packet; body not stored", len(m.Body)), false)
		}
		return 0, fmt.Errorf("inserting inbox row for message %s: %w", m.ID, err)
	}
	if herr := in.runHandler(ctx, tx, m); herr != nil {
		_ = tx.Rollback()
		return in.handlerFailed(ctx, m, herr, -1, last)
	}
	if err := tx.Commit(); err != nil {
		// The outcome is unknown; a redelivery will find the row or not.
		return 0, fmt.Errorf("committing inbox row and handler work for message %s: %w", m.ID, err)
	}
	in.dedup.markDone(ctx, m.ID)
	return Processed, nil
}

// existing handles a message whose row is already there.
//
// SUCCESS and FAILED are final: ACK, no work. PENDING_RETRY means an earlier copy
// failed and the retry task owns the message: it will republish it when due, so this
// copy (a broker redelivery or a duplicate from the relay) is ACKed without running the
// handler, even if the row is due. Running it here would ignore the backoff, and the
// row still holds the body, so nothing is lost. RETRYING means the retry task
// republished it: run the handler again while holding the row lock, and turn the row
// SUCCESS with a version-checked update.
func (in *Inbox) existing(ctx context.Context, m Message, last bool) (Outcome, error) {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("beginning inbox transaction for message %s: %w", m.ID, err)
	}
	r, found, err := in.st.lockRow(ctx, tx, m.ID)
	if err != nil {
		_ = tx.Rollback()
		return 0, fmt.Errorf("reading inbox row of message %s: %w", m.ID, err)
	}
	if !found {
		_ = tx.Rollback()
		return 0, errRowVanished
	}
	switch r.status {
	case StatusSuccess:
		_ = tx.Rollback()
		in.dedup.markDone(ctx, m.ID)
		in.logDuplicate(m, r)
		return Duplicate, nil
	case StatusFailed, StatusPendingRetry:
		_ = tx.Rollback()
		in.logDuplicate(m, r)
		return Duplicate, nil
	case StatusRetrying:
	default:
		_ = tx.Rollback()
		in.log.Warn("inbox row has an unknown status; ACKing without work",
			slog.String("message_id", m.ID), slog.String("status", r.status))
		return Duplicate, nil
	}
	m.RetryCount = r.retryCount
	if herr := in.runHandler(ctx, tx, m); herr != nil {
		_ = tx.Rollback()
		return in.handlerFailed(ctx, m, herr, r.version, last)
	}
	if err := in.st.markSuccess(ctx, tx, r); err != nil {
		_ = tx.Rollback()
		return 0, fmt.Errorf("marking retried message %s SUCCESS: %w", m.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("committing retried message %s: %w", m.ID, err)
	}
	in.dedup.markDone(ctx, m.ID)
	in.log.Info("retried message succeeded", in.fields(m, slog.Int("retry_count", r.retryCount))...)
	return Processed, nil
}

// handlerFailed runs after the handler's transaction was rolled back. version is the
// version of the RETRYING row the attempt ran on, or -1 for a first delivery.
func (in *Inbox) handlerFailed(ctx context.Context, m Message, herr error, version int, last bool) (Outcome, error) {
	if ctx.Err() != nil {
		// Cancelled mid-handler (hard shutdown): not the message's fault. Leave it to
		// the broker's redelivery.
		return 0, fmt.Errorf("handling message %s: %w", m.ID, ctx.Err())
	}
	if isTransient(herr) && !last {
		return 0, herr // the whole transaction runs again
	}
	out, err := in.recordFailure(ctx, m, herr, version)
	return out, unrecorded(err)
}

// recordFailure writes PENDING_RETRY (with backoff) or FAILED in a transaction of its
// own, the handler's having been rolled back. A deadlock or lock wait timeout runs
// the record again, never the handler: the handler has run for this delivery.
func (in *Inbox) recordFailure(ctx context.Context, m Message, herr error, version int) (Outcome, error) {
	malformed := errors.Is(herr, ErrMalformed)
	msg := errorText(herr)
	for i := 1; i <= txAttempts; i++ {
		out, retry, err := in.recordFailureOnce(ctx, m, msg, malformed, version)
		if err != nil && isTransient(err) && i < txAttempts && ctx.Err() == nil {
			// Only this record is run again. After the last attempt the
			// error goes back marked unrecorded (handlerFailed), so runTx
			// requeues the delivery instead of running the handler again
			// at once.
			in.log.Debug("recording a failure hit a transient error; recording it again",
				slog.String("message_id", m.ID), slog.Int("attempt", i), slog.Any("error", err))
			if transientPause(ctx, i) != nil {
				return 0, err
			}
			continue
		}
		if !retry {
			return out, err
		}
	}
	return 0, fmt.Errorf("recording failure of message %s: row kept changing underneath", m.ID)
}

func (in *Inbox) recordFailureOnce(ctx context.Context, m Message, msg string, malformed bool,
	version int) (out Outcome, retry bool, err error) {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, fmt.Errorf("beginning failure record for message %s: %w", m.ID, err)
	}
	defer func() {
		if err != nil || retry || out == Duplicate {
			_ = tx.Rollback()
		}
	}()
	var r rowState
	found := false
	if version >= 0 {
		// A retry ran on a RETRYING row, which is there: lock it (a record
		// lock; the unique key matches one existing row).
		if r, found, err = in.st.lockRow(ctx, tx, m.ID); err != nil {
			return 0, false, fmt.Errorf("reading inbox row of failed message %s: %w", m.ID, err)
		}
	}
	var status string
	var delay time.Duration
	switch {
	case !found:
		// A first delivery (or a row deleted under a retry): INSERT at once,
		// with no locking read before it. Under REPEATABLE READ, SELECT ...
		// FOR UPDATE of a missing row locks the gap where it would go; two
		// workers recording failures of neighbouring ids then each hold that
		// gap and wait to insert into it, an InnoDB deadlock (1213) that
		// a burst of failures hit every few messages. A plain INSERT takes
		// no gap lock, and on a duplicate it has waited for the concurrent
		// copy holding the key to commit.
		status, delay = StatusPendingRetry, Backoff(0, in.cfg.RetryBackoff, in.cfg.RetryMaxBackoff)
		if malformed {
			status = StatusFailed
		}
		err = in.st.insertFailure(ctx, tx, m, m.ID, status, delay, msg, in.cfg.MaxRetries)
		if isDuplicateKey(err) && version < 0 {
			// A concurrent copy recorded an outcome while this attempt ran (it
			// succeeded or failed first). That record stands; this failure adds
			// nothing.
			r, _, _ = in.st.readRow(ctx, tx, m.ID) // for the log line only
			in.logDuplicate(m, r)
			return Duplicate, false, nil
		}
		if isDuplicateKey(err) {
			return 0, true, nil // the row is back: read it again
		}
		if err != nil {
			return 0, false, fmt.Errorf("recording failure of message %s: %w", m.ID, err)
		}
	case r.status != StatusRetrying || r.version != version:
		// Another copy of the message recorded an outcome while this attempt ran (it
		// succeeded, failed first, or the retry task took the row back). That record
		// stands; this failure adds nothing.
		in.logDuplicate(m, r)
		return Duplicate, false, nil
	default:
		status, delay = StatusPendingRetry, Backoff(r.retryCount, in.cfg.RetryBackoff, in.cfg.RetryMaxBackoff)
		if malformed || r.retryCount >= r.maxRetryCount {
			status = StatusFailed
		}
		if err = in.st.updateFailure(ctx, tx, r, status, delay, msg); err != nil {
			return 0, false, fmt.Errorf("recording failed retry of message %s: %w", m.ID, err)
		}
	}
	if err = tx.Commit(); err != nil {
		return 0, false, fmt.Errorf("committing failure record of message %s: %w", m.ID, err)
	}
	fields := in.fields(m, slog.String("status", status), slog.Int("retry_count", r.retryCount),
		slog.String("error", msg))
	if status == StatusFailed {
		in.log.Warn("message FAILED", fields...)
		return Failed, false, nil
	}
	in.log.Info("handler failed; retry scheduled", append(fields, slog.Duration("backoff", delay))...)
	return RetryScheduled, false, nil
}

// reject records FAILED, under id, a message that cannot be handled at all: its own id
// is unusable (id is then derived from the delivery) or its body cannot be stored
// (keepBody false).
func (in *Inbox) reject(ctx context.Context, m Message, id, reason string, keepBody bool) (Outcome, error) {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("beginning rejection record: %w", err)
	}
	stored := m
	if !keepBody {
		stored.Body = nil
	}
	err = in.st.insertFailure(ctx, tx, stored, id, StatusFailed, 0, reason, in.cfg.MaxRetries)
	if isDuplicateKey(err) {
		_ = tx.Rollback()
		return Duplicate, nil // this very delivery was recorded before
	}
	if err != nil {
		_ = tx.Rollback()
		return 0, fmt.Errorf("recording rejected message as %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("committing rejected message %s: %w", id, err)
	}
	in.log.Warn("message FAILED without running the handler",
		slog.String("consumer", in.cfg.ConsumerName), slog.String("message_id", m.ID),
		slog.String("recorded_as", id), slog.String("reason", reason),
		slog.String("exchange", m.Exchange), slog.String("routing_key", m.RoutingKey))
	return Failed, nil
}

// runHandler turns a panic into an error so that one bad message costs a retry, not
// the worker.
func (in *Inbox) runHandler(ctx context.Context, tx *sql.Tx, m Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			in.log.Error("handler panicked", in.fields(m, slog.Any("panic", v),
				slog.String("stack", string(debug.Stack())))...)
			err = &panicError{value: v}
		}
	}()
	return in.handler(in.handlerContext(ctx, m), tx, m)
}

func (in *Inbox) logDuplicate(m Message, r rowState) {
	in.log.Debug("duplicate delivery; ACK without work",
		in.fields(m, slog.String("status", r.status), slog.Bool("redelivered", m.Redelivered))...)
}

func (in *Inbox) fields(m Message, extra ...any) []any {
	return append([]any{
		slog.String("consumer", in.cfg.ConsumerName), slog.String("message_id", m.ID),
		slog.String("exchange", m.Exchange), slog.String("routing_key", m.RoutingKey),
	}, extra...)
}

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Retrier republishes due PENDING_RETRY rows and takes back RETRYING rows whose
// republished copy never came back. Several Retriers (one per process) may run on one
// table: rows are claimed with FOR UPDATE SKIP LOCKED, so each due row is claimed by
// exactly one of them, and every later change is version-checked.
type Retrier struct {
	cfg Config
	st  store
	pub Publisher
	log *slog.Logger
}

// RetryStats counts what one RunOnce did.
type RetryStats struct {
	Republished int // claimed RETRYING and confirmed by the broker
	Released    int // claimed, publish failed, back to PENDING_RETRY
	Reset       int // stuck RETRYING rows made PENDING_RETRY again
	Failed      int // rows made FAILED (out of retries)
}

// NewRetrier returns a Retrier for cfg.ConsumerName's rows; log may be nil (no logs).
func NewRetrier(cfg Config, db *sql.DB, pub Publisher, log *slog.Logger) (*Retrier, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.mapping().Kind != KindState {
		return nil, fmt.Errorf("inbox config: Preset: %s keeps no message bodies, so there is nothing to retry from (failed deliveries are requeued)", cfg.Preset)
	}
	return &Retrier{
		cfg: cfg, pub: pub, log: orDiscard(log),
		st: newStore(db, cfg.mapping(), cfg.ConsumerName),
	}, nil
}

// Run calls RunOnce every RetryInterval until ctx is done. Errors are logged and the
// next round tries again: a database or broker outage delays retries, nothing more.
func (r *Retrier) Run(ctx context.Context) error {
	return every(ctx, r.cfg.RetryInterval, func() {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("retry round failed", slog.String("consumer", r.cfg.ConsumerName), slog.Any("error", err))
		}
	})
}

// every calls round at once, then every interval until ctx is done, and
// returns nil: the background tasks (retry, retention) log their own
// failures and try again next round.
func every(ctx context.Context, interval time.Duration, round func()) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		round()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce resets stuck rows, then claims and republishes due rows batch by batch until
// none is due.
func (r *Retrier) RunOnce(ctx context.Context) (RetryStats, error) {
	var st RetryStats
	reset, failed, err := r.resetStuck(ctx)
	st.Reset, st.Failed = reset, failed
	if err != nil {
		return st, fmt.Errorf("resetting stuck RETRYING rows: %w", err)
	}
	for ctx.Err() == nil {
		rows, err := r.claimDue(ctx)
		if err != nil {
			return st, fmt.Errorf("claiming due PENDING_RETRY rows: %w", err)
		}
		done, err := r.republish(ctx, rows, &st)
		if err != nil || done < len(rows) || len(rows) < r.cfg.RetryBatch {
			return st, err
		}
	}
	return st, nil
}

// claimed is a row moved to RETRYING by this Retrier.
type claimed struct {
	id                     int64
	messageID              string
	content                []byte
	contentType            string
	headers                []byte // the headers column (nil: none kept)
	exchange, routingKey   string
	retryCount, maxRetries int
	version                int
}

// claimDue moves up to RetryBatch due rows to RETRYING in one transaction. The claim
// counts as a retry (retry_count+1) and sets next_retry_time to the deadline by which
// the republished copy must have been consumed.
func (r *Retrier) claimDue(ctx context.Context) ([]claimed, error) {
	tx, err := r.st.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	c := r.st.m.Columns
	mine, args := r.st.mine()
	contentType, headers := "''", "NULL"
	if c.ContentType != "" {
		contentType = q(c.ContentType)
	}
	if c.Headers != "" {
		headers = q(c.Headers)
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+list(c.ID, c.MessageID, c.Content)+`, `+contentType+`, `+headers+`, `+
		list(c.Exchange, c.RoutingKey, c.RetryCount, c.MaxRetryCount, c.Version)+` FROM `+r.st.table+`
		WHERE `+mine+q(c.Status)+` = 'PENDING_RETRY' AND `+q(c.NextRetryTime)+` <= NOW(3)
		ORDER BY `+q(c.NextRetryTime)+` LIMIT ? FOR UPDATE SKIP LOCKED`,
		append(args, r.cfg.RetryBatch)...)
	if err != nil {
		return nil, err
	}
	var out []claimed
	for rows.Next() {
		var c claimed
		if err := rows.Scan(&c.id, &c.messageID, &c.content, &c.contentType, &c.headers, &c.exchange,
			&c.routingKey, &c.retryCount, &c.maxRetries, &c.version); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	col := c
	for i := range out {
		c := &out[i]
		res, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s
			SET %s = 'RETRYING', %[3]s = %[3]s + 1,
			    %s = NOW(3) + INTERVAL ? MICROSECOND, %[5]s = %[5]s + 1
			WHERE %s = ? AND %[5]s = ?`, r.st.table, q(col.Status), q(col.RetryCount), q(col.NextRetryTime),
			q(col.Version), q(col.ID)),
			r.cfg.RetryStuckTimeout.Microseconds(), c.id, c.version)
		if err := checkOne(res, err); err != nil {
			return nil, fmt.Errorf("claiming message %s: %w", c.messageID, err)
		}
		c.retryCount++
		c.version++
	}
	return out, tx.Commit()
}

// republish publishes claimed rows in order and returns how many it got through. On a
// broker failure it gives the rest of the batch back instead of burning their retries.
func (r *Retrier) republish(ctx context.Context, rows []claimed, st *RetryStats) (int, error) {
	for i, c := range rows {
		exchange, key := c.exchange, c.routingKey
		if r.cfg.RetryToQueue {
			exchange, key = "", r.cfg.Queue // the default exchange routes by queue name
		}
		fields := []any{slog.String("consumer", r.cfg.ConsumerName),
			slog.String("message_id", c.messageID), slog.String("exchange", exchange),
			slog.String("routing_key", key), slog.Int("retry_count", c.retryCount)}
		err := r.pub.Publish(ctx, exchange, key, amqp.Publishing{
			MessageId:    c.messageID,
			ContentType:  c.contentType,
			DeliveryMode: amqp.Persistent,
			Timestamp:    time.Now(),
			Body:         c.content,
			Headers:      r.retryHeaders(c, fields),
		})
		switch {
		case err == nil:
			st.Republished++
			r.log.Debug("republished message for retry", fields...)
			continue
		case errors.Is(err, ErrUnroutable):
			// The topology will not change by itself: count the retry as used.
			failed, rerr := r.release(ctx, c, true, "republish failed: "+err.Error())
			if rerr != nil {
				return i, rerr
			}
			if failed {
				st.Failed++
			} else {
				st.Released++
			}
			r.log.Warn("republished message was unroutable", append(fields, slog.Any("error", err))...)
			continue
		}
		// Broker unreachable or the publish is unconfirmed: give this and the remaining
		// claims back with their retry unused. An unconfirmed copy may still arrive; the
		// version check in release leaves the row alone if it was consumed meanwhile.
		r.log.Warn("republish failed; releasing claims", append(fields, slog.Any("error", err))...)
		for _, rest := range rows[i:] {
			if _, rerr := r.release(ctx, rest, false, ""); rerr != nil {
				r.log.Warn("releasing claim failed; the stuck timeout will take it back",
					slog.String("message_id", rest.messageID), slog.Any("error", rerr))
				continue
			}
			st.Released++
		}
		return i, fmt.Errorf("republishing message %s: %w", c.messageID, err)
	}
	return len(rows), nil
}

// retryHeaders are the original message's headers, as kept in the headers column, and
// the retry count. Headers that cannot be read are left out, with a warning: a retry
// without them beats no retry.
func (r *Retrier) retryHeaders(c claimed, fields []any) amqp.Table {
	h, err := decodeHeaders(c.headers)
	if err != nil {
		r.log.Warn("republishing without the original headers: the headers column cannot be read", append(fields, slog.Any("error", err))...)
	}
	if h == nil {
		h = amqp.Table{}
	}
	h[RetryCountHeader] = int32(c.retryCount)
	return h
}

// release puts a claimed row back to PENDING_RETRY. With countRetry the claim's retry is
// spent (FAILED when none is left) and errMsg recorded; without it the retry is given
// back and the row is due again after RetryInterval.
func (r *Retrier) release(ctx context.Context, c claimed, countRetry bool, errMsg string) (failed bool, err error) {
	status, retries := StatusPendingRetry, c.retryCount-1
	delay := r.cfg.RetryInterval
	if countRetry {
		retries = c.retryCount
		delay = Backoff(c.retryCount, r.cfg.RetryBackoff, r.cfg.RetryMaxBackoff)
		if c.retryCount >= c.maxRetries {
			status = StatusFailed
		}
	}
	col := r.st.m.Columns
	res, err := r.st.execTx(ctx, fmt.Sprintf(`UPDATE %s
		SET %[2]s = ?, %s = ?, %s = NOW(3) + INTERVAL ? MICROSECOND,
		    %[5]s = COALESCE(NULLIF(?, ''), %[5]s), %[6]s = %[6]s + 1
		WHERE %s = ? AND %[6]s = ? AND %[2]s = 'RETRYING'`, r.st.table, q(col.Status), q(col.RetryCount),
		q(col.NextRetryTime), q(col.Error), q(col.Version), q(col.ID)),
		status, retries, retryDelayArg(status, delay), truncateUTF8(errMsg, maxErrorMsgLen),
		c.id, c.version)
	if err := checkOne(res, err); err != nil {
		if errors.Is(err, errVersionConflict) {
			return false, nil // the republished copy was consumed after all
		}
		return false, fmt.Errorf("releasing claim on message %s: %w", c.messageID, err)
	}
	return status == StatusFailed, nil
}

// resetStuck takes back RETRYING rows past their deadline: the republished copy was
// lost, or is still stuck in a backlog (if it arrives later it finds PENDING_RETRY and
// is ACKed without work; the next republish carries the message). A row being handled
// right now is locked by its consumer and skipped.
func (r *Retrier) resetStuck(ctx context.Context) (reset, failed int, err error) {
	tx, err := r.st.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	col := r.st.m.Columns
	mine, args := r.st.mine()
	rows, err := tx.QueryContext(ctx, `SELECT `+list(col.ID, col.MessageID, col.RetryCount, col.MaxRetryCount, col.Version, col.Error)+`
		FROM `+r.st.table+`
		WHERE `+mine+q(col.Status)+` = 'RETRYING' AND `+q(col.NextRetryTime)+` <= NOW(3)
		ORDER BY `+q(col.NextRetryTime)+` LIMIT ? FOR UPDATE SKIP LOCKED`,
		append(args, r.cfg.RetryBatch)...)
	if err != nil {
		return 0, 0, err
	}
	type stuck struct {
		rowState
		messageID string
	}
	var all []stuck
	for rows.Next() {
		var s stuck
		var errMsg sql.NullString
		if err := rows.Scan(&s.id, &s.messageID, &s.retryCount, &s.maxRetryCount, &s.version, &errMsg); err != nil {
			rows.Close()
			return 0, 0, err
		}
		s.errorMsg = errMsg.String
		all = append(all, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	for _, s := range all {
		status, msg := StatusPendingRetry, s.errorMsg
		if s.retryCount >= s.maxRetryCount {
			status = StatusFailed
			msg = truncateUTF8("retry "+strconv.Itoa(s.retryCount)+" was not consumed within "+
				r.cfg.RetryStuckTimeout.String()+"; last error: "+s.errorMsg, maxErrorMsgLen)
			failed++
		} else {
			reset++
		}
		res, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s
			SET %s = ?, %s = NOW(3) + INTERVAL ? MICROSECOND,
			    %s = NULLIF(?, ''), %[5]s = %[5]s + 1
			WHERE %s = ? AND %[5]s = ?`, r.st.table, q(col.Status), q(col.NextRetryTime), q(col.Error),
			q(col.Version), q(col.ID)),
			status, retryDelayArg(status, 0), msg, s.id, s.version)
		if err := checkOne(res, err); err != nil {
			return 0, 0, fmt.Errorf("taking back message %s: %w", s.messageID, err)
		}
		r.log.Warn("retry not consumed in time; taken back", slog.String("consumer", r.cfg.ConsumerName),
			slog.String("message_id", s.messageID), slog.String("status", status),
			slog.Int("retry_count", s.retryCount))
	}
	return reset, failed, tx.Commit()
}

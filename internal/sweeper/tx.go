package sweeper

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// readCommitted: a FOR UPDATE scan over the status index under REPEATABLE
// READ takes gap locks, and the application's outbox INSERTs into those gaps
// then deadlock with it (seen with the seed's own claim SQL). READ COMMITTED
// locks only the rows it returns. (It needs binlog_format ROW or MIXED on
// the primary, which a relay reading row events has.)
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// inTx runs fn in a READ COMMITTED transaction on the primary.
func (s *Sweeper) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return inTx(ctx, s.primary, fn)
}

// inTx runs fn in a READ COMMITTED transaction on the primary, committed
// when fn returns nil.
func inTx(ctx context.Context, primary *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := primary.BeginTx(ctx, readCommitted)
	if err != nil {
		return fmt.Errorf("starting a transaction on the primary: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// persist retries a write that records what was already published, until
// the primary takes it or ctx ends: giving up would leave published rows to
// be published again.
func (s *Sweeper) persist(ctx context.Context, op func() error) error {
	wait := backoff.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := op()
		if err == nil || ctx.Err() != nil {
			return err
		}
		pause := wait.Next()
		s.log.Warn("recording sweep results failed, retrying", zap.Error(err), zap.Duration("backoff", pause))
		if err := backoff.Sleep(ctx, pause); err != nil {
			return err
		}
	}
}

// MySQL error numbers that mean "try again": the statement lost a lock race.
const (
	erLockWaitTimeout = 1205
	erLockDeadlock    = 1213
)

// lockConflict reports a deadlock or lock wait timeout.
func lockConflict(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == erLockDeadlock || me.Number == erLockWaitTimeout)
}

// lockRetries bounds the attempts of a statement that keeps losing lock
// races; lockPause spaces them, jittered so that two sweepers that
// deadlocked on the same rows do not collide again in step.
const lockRetries = 5

var lockPause = backoff.Backoff{Initial: 30 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 1.5, Jitter: 0.6}

// retryLocks retries op after a deadlock or lock wait timeout, a few times
// with a short random pause; any other error is returned at once. After
// that the round gives up and the next one tries again: never fatal.
func retryLocks(ctx context.Context, op func() error) error {
	var err error
	for attempt := 0; attempt < lockRetries; attempt++ {
		if err = op(); err == nil || !lockConflict(err) {
			return err
		}
		if werr := backoff.Sleep(ctx, lockPause.Delay(attempt)); werr != nil {
			return werr
		}
	}
	return err
}

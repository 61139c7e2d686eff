package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// checkSession reads, once at start on a connection of the pool, the session
// settings the inbox cannot work with.
//
// The inbox takes the caller's *sql.DB, opened with whatever DSN the application
// uses, and holds on every one of them: it sends one statement per call
// (multiStatements does not matter), works with client-side interpolation or
// server-side prepared statements (interpolateParams), checks RowsAffected only on
// updates that also bump the row's version, so that rows matched and rows changed
// are the same count (clientFoundRows), and writes only in explicit transactions
// (autocommit=0). What it cannot work around is a session that allows the server
// to skip the unique key check, which is how a duplicate is recognised.
func checkSession(ctx context.Context, tx *sql.Tx) error {
	var uniqueChecks int64
	if err := tx.QueryRowContext(ctx, `SELECT @@SESSION.unique_checks`).Scan(&uniqueChecks); err != nil {
		return fmt.Errorf("reading the database session's unique_checks: %w", err)
	}
	return uniqueChecksProblem(uniqueChecks != 0)
}

// uniqueChecksProblem explains why a session with unique_checks off is refused.
// With unique_checks=0 a storage engine "is permitted to assume that duplicate keys
// are not present in input data" (MySQL reference manual, unique_checks); InnoDB
// then buffers an insert into a secondary unique index, such as (consumer,
// message_id), without checking it when its change buffer is on. A second copy of
// a message could then insert its own row instead of waiting for the first and
// finding it, and its handler's work would commit twice. The inbox's input is
// made of duplicates, so no session of its pool may promise there are none.
func uniqueChecksProblem(on bool) error {
	if on {
		return nil
	}
	return errors.New("inbox: the database session runs with unique_checks=0 (a system variable in the DSN, " +
		"or set by a connection hook): the server may then skip the check of the unique key on the message id, " +
		"which is how a duplicate delivery is recognised, and a duplicate would be handled again; " +
		"open the inbox's pool without unique_checks=0")
}

// Package binlog streams a MySQL or MariaDB replica's binary log and turns
// the inserts into configured outbox tables into rows, with an explicit
// marker at the end of every transaction so the caller can checkpoint only
// whole transactions.
//
// # Use
//
// Describe the tables with pkg/outbox (a Preset, then Validate), build a
// Reader with New, and Run it from a Position: a saved one
// (pkg/checkpoint), or CurrentPosition to read only what is committed
// from now on. Run sends Events in binlog order on a channel the caller
// bounds:
//
//   - KindRow: an outbox row as its transaction committed it (a row
//     inserted and then updated or deleted in the same transaction comes
//     as it was at the commit);
//   - KindCommit: the transaction ended; every row of it came before. Feed
//     it to a Tracker, and save the Tracker's Position once everything
//     before it is done;
//   - KindRename: an outbox table was renamed (the rows sent before it now
//     live under the new name).
//
// ExampleNew is a whole loop. The source must log rows (binlog_format=ROW,
// binlog_row_image=FULL); with binlog_row_metadata=FULL each row carries its
// column names, otherwise give the reader a SchemaSource (InfoSchema).
//
// # Errors and logging
//
// Connection and replication errors are retried with backoff from the last
// whole transaction; Run returns only ErrPositionPurged (the source no
// longer has the start position), ErrServerIDConflict, ErrXABufferFull, an
// error it cannot retry, or nil when ctx ends. The reader logs connections,
// reconnects and failovers to the *slog.Logger given WithLogger (nothing
// by default), the convention of every public package of this module; a
// program logging with zap passes slog.New(zapslog.NewHandler(core)).
package binlog

package rowstatus

import (
	"context"
	"database/sql"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// SentReader tells which rows are SENT now, reading the source replica (never
// the primary): the relay asks it of the rows it replays after a restart, so
// that rows a killed run had published and marked are not published again.
type SentReader struct {
	DB *sql.DB
	// Primary, when set, is the server the marks are written to: CatchUp
	// reads its logged position there and waits for DB to apply it. Flavor
	// is binlog.FlavorMySQL or binlog.FlavorMariaDB.
	Primary *sql.DB
	Flavor  string
}

// CatchUp waits up to within for the replica (DB) to have applied what the
// primary has logged now: gtid_executed and WAIT_FOR_EXECUTED_GTID_SET on
// MySQL, gtid_binlog_pos and MASTER_GTID_WAIT on MariaDB. One read on each
// server, no privilege beyond the relay's. Without a primary it returns at
// once.
//
// It returns, whenever it read the primary's position (an error about the
// wait included), after: whether a transaction's commit is outside that
// position, so committed after this call. A run before this one never read
// such a transaction, nor anything after it in the binlog, so none of those
// rows is SENT by it. A commit without a GTID is never after; after is nil
// when the position could not be read or is empty.
func (s SentReader) CatchUp(ctx context.Context, within time.Duration) (after func(binlog.Commit) bool, err error) {
	if s.Primary == nil {
		return nil, nil
	}
	posVar, wait := "@@GLOBAL.gtid_binlog_pos", "SELECT MASTER_GTID_WAIT(?, ?)"
	if s.Flavor == binlog.FlavorMySQL {
		posVar, wait = "@@GLOBAL.gtid_executed", "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)"
	}
	var (
		pos              string
		primaryID, ownID int64
	)
	if err := s.Primary.QueryRowContext(ctx, "SELECT "+posVar+", @@server_id").Scan(&pos, &primaryID); err != nil {
		return nil, fmt.Errorf("reading the primary's position: %w", err)
	}
	pos = strings.ReplaceAll(pos, "\n", "")
	after = outside(s.Flavor, pos)
	// A relay that reads the primary itself has nothing to wait for (and
	// MariaDB's MASTER_GTID_WAIT would wait for gtid_slave_pos there, which
	// the primary's own writes do not move).
	if err := s.DB.QueryRowContext(ctx, "SELECT @@server_id").Scan(&ownID); err != nil {
		return after, fmt.Errorf("reading the replica's server id: %w", err)
	}
	if pos == "" || ownID == primaryID {
		return after, nil
	}
	var res sql.NullInt64
	if err := s.DB.QueryRowContext(ctx, wait, pos, within.Seconds()).Scan(&res); err != nil {
		return after, fmt.Errorf("waiting for the replica to apply the primary's position: %w", err)
	}
	if !res.Valid || res.Int64 != 0 {
		return after, fmt.Errorf("the replica had not applied the primary's position within %s", within)
	}
	return after, nil
}

// outside returns whether a commit's GTID is outside the GTID set pos (nil
// for an empty or unreadable pos).
func outside(flavor, pos string) func(binlog.Commit) bool {
	if pos == "" {
		return nil
	}
	if _, err := binlog.ContainsGTID(flavor, pos, pos); err != nil {
		return nil
	}
	return func(c binlog.Commit) bool {
		g := c.GTID.String()
		if g == "" {
			return false
		}
		in, err := binlog.ContainsGTID(flavor, pos, g)
		return err == nil && !in
	}
}

// Sent returns, of ids (rows of t), the ones whose status is SENT now, keyed
// by the id's text, each with its Fingerprint as the replica computes it. A
// table without a status column has none.
func (s SentReader) Sent(ctx context.Context, t *outbox.Table, ids []any) (map[string]string, error) {
	out := map[string]string{}
	if t.Columns.Status == "" || len(ids) == 0 {
		return out, nil
	}
	rows, err := s.DB.QueryContext(ctx, outboxsql.SentAmongSQL(t, len(ids)), ids...)
	if err != nil {
		return nil, fmt.Errorf("reading which of %d replayed rows of %s are sent: %w", len(ids), t.FullName(), err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, msg sql.RawBytes
		dest := []any{&id}
		if len(cols) > 1 {
			dest = append(dest, &msg)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("reading which replayed rows of %s are sent: %w", t.FullName(), err)
		}
		out[string(id)] = string(msg)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading which replayed rows of %s are sent: %w", t.FullName(), err)
	}
	return out, nil
}

// Fingerprint tells apart two messages stored under one id of t (a table
// truncated, or rotated by a rename, starts its ids again), from a row's
// values as the binlog decoded them: the message id's text where the table
// has a message-id column of its own, else the CRC32 of the payload's bytes
// (as MySQL's and MariaDB's CRC32() compute it over the stored bytes), ""
// for a NULL or no payload. Sent returns the same of each row it finds: the
// replay check skips a replayed row only when the two agree. A SENT mark
// matched by id alone can land on a new row with an old row's id (rename.go
// writes marks by name), and that row, never published, must not be taken
// for the old one. A payload the binlog renders otherwise than CRC32()
// reads it (MySQL's JSON type) never agrees: such rows are published
// again, duplicates and never a loss.
func Fingerprint(t *outbox.Table, values map[string]any) string {
	c := t.Columns
	if OwnMessageID(t) {
		return colval.ValueString(values[c.MessageID])
	}
	if c.Payload == "" {
		return ""
	}
	var b []byte
	switch v := values[c.Payload].(type) {
	case nil:
		return ""
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		b = []byte(colval.ValueString(v))
	}
	return strconv.FormatUint(uint64(crc32.ChecksumIEEE(b)), 10)
}

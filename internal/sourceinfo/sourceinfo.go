// Package sourceinfo reads what the relay needs to know of a replication
// source besides its binlog stream: server settings the start-up checks
// report, and the meaning of the errors a binlog dump ends with. It also
// owns the handshake that opens a binlog dump (Handshake, StartSync), so a
// server's answer there can never crash the relay.
package sourceinfo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// CompressionSetting reads @@global.binlog_transaction_compression (MySQL
// 8.0.20+): "ON" means transactions reach the binlog as ZSTD
// TRANSACTION_PAYLOAD events, which the reader decodes like uncompressed
// ones. It returns "" and no error when the server has no such variable
// (MariaDB, MySQL before 8.0.20): binlog transaction compression does not
// exist there. (MariaDB's log_bin_compress compresses single events, which
// go-mysql also decodes.)
func CompressionSetting(ctx context.Context, db *sql.DB) (string, error) {
	var v sql.NullString
	err := db.QueryRowContext(ctx, "SELECT @@global.binlog_transaction_compression").Scan(&v)
	var my *mysql.MySQLError
	if errors.As(err, &my) && my.Number == 1193 { // ER_UNKNOWN_SYSTEM_VARIABLE
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading @@binlog_transaction_compression: %w", err)
	}
	switch v.String {
	case "1":
		return "ON", nil
	case "0":
		return "OFF", nil
	}
	return v.String, nil
}

// purgedMessages are the texts of error 1236 (ER_MASTER_FATAL_ERROR_READING_BINLOG)
// that mean the start position is no longer in the source's binlogs, lower
// case. Error 1236 carries many other conditions (a duplicate server_id, an
// out-of-order GTID in strict mode, an event larger than
// max_allowed_packet, a truncated or corrupt binlog), so only these count as
// purged; the rest are reported as they are.
var purgedMessages = []string{
	// MySQL and MariaDB, file/position start (sql/rpl_binlog_sender.cc,
	// sql/sql_repl.cc): the file named is not in the binlog index.
	"could not find first log file name in binary log index file",
	// MySQL 5.6 to 8.0.22, GTID auto-position: "The slave is connecting
	// using CHANGE MASTER TO MASTER_AUTO_POSITION = 1, but the master has
	// purged binary logs containing GTIDs that the slave requires."
	"has purged binary logs containing gtids",
	// MySQL 8.0.23+: "Cannot replicate because the master purged required
	// binary logs" (8.0.26+: "the source purged required binary logs").
	"purged required binary logs",
	// MariaDB GTID start (sql/sql_repl.cc, gtid_find_binlog_file): "Could
	// not find GTID state requested by slave in any binlog files. Probably
	// the slave state is too old and required binlog files have been purged."
	"could not find gtid state requested by slave in any binlog files",
	"required binlog files have been purged",
}

// IsPurgedMessage reports whether the text of an error 1236 means the
// position is no longer in the source's binlogs (and nothing else).
func IsPurgedMessage(msg string) bool {
	m := strings.ToLower(msg)
	for _, p := range purgedMessages {
		if strings.Contains(m, p) {
			return true
		}
	}
	return false
}

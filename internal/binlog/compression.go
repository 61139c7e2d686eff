package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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

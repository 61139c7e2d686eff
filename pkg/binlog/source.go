package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// DetectFlavor asks the server behind db whether it is MySQL or MariaDB
// (FlavorMySQL or FlavorMariaDB), from its version string.
func DetectFlavor(ctx context.Context, db *sql.DB) (string, error) {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", fmt.Errorf("reading the server's version: %w", err)
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return FlavorMariaDB, nil
	}
	return FlavorMySQL, nil
}

// CurrentPosition is where the binlog of the server behind db ends now:
// the position a stream starts from to read only transactions committed
// after this call. db needs no privilege beyond REPLICATION CLIENT (or
// BINLOG MONITOR on MariaDB).
func CurrentPosition(ctx context.Context, db *sql.DB, flavor string) (Position, error) {
	p := Position{Flavor: flavor}
	file, pos, err := masterStatus(ctx, db, flavor)
	if err != nil {
		return p, err
	}
	p.File, p.Pos = file, pos
	var gtid sql.NullString
	if flavor == FlavorMariaDB {
		err = db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&gtid)
	} else {
		var mode string
		if err = db.QueryRowContext(ctx, "SELECT @@gtid_mode").Scan(&mode); err == nil && strings.EqualFold(mode, "ON") {
			err = db.QueryRowContext(ctx, "SELECT @@gtid_executed").Scan(&gtid)
		}
	}
	if err != nil {
		return p, fmt.Errorf("reading the source's GTID position: %w", err)
	}
	// An empty set (a server that never logged a GTID transaction) starts
	// by file/pos; the tracker picks GTIDs up from the first transaction.
	p.GTIDSet = strings.ReplaceAll(gtid.String, "\n", "")
	return p, nil
}

// masterStatus reads the file and position the source writes now, by
// column name, as the column set differs between versions: SHOW BINARY LOG
// STATUS on MySQL (8.2 and later; MySQL 9 removed SHOW MASTER STATUS), SHOW
// MASTER STATUS on MariaDB and, where the first is unknown, older MySQL.
func masterStatus(ctx context.Context, db *sql.DB, flavor string) (string, uint32, error) {
	q := "SHOW MASTER STATUS"
	if flavor == FlavorMySQL {
		q = "SHOW BINARY LOG STATUS"
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil && flavor == FlavorMySQL {
		q = "SHOW MASTER STATUS"
		rows, err = db.QueryContext(ctx, q)
	}
	if err != nil {
		return "", 0, fmt.Errorf("reading the source's binlog position (%s): %w", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", 0, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", 0, fmt.Errorf("reading the source's binlog position: %w", err)
		}
		return "", 0, fmt.Errorf("the source has binary logging off (%s is empty): start it with log_bin", q)
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", 0, err
	}
	var file string
	var pos uint64
	for i, c := range cols {
		switch c {
		case "File":
			file = string(vals[i])
		case "Position":
			pos, _ = strconv.ParseUint(string(vals[i]), 10, 32)
		}
	}
	return file, uint32(pos), nil
}

package replica

// The servers the watch and the status lines read: the source replica the
// relay streams from and the primary it replicates, whose GTID position the
// delay is measured against.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// Servers is what this package reads from the relay's connections.
type Servers interface {
	Source() *sql.DB
	// SourceAddr names the source streamed from now (host:port); it
	// changes when the relay fails over to another of source.hosts.
	SourceAddr() string
	// Flavor is the source's flavor (binlog.FlavorMariaDB or
	// binlog.FlavorMySQL).
	Flavor(ctx context.Context) (string, error)
	Primary() *sql.DB
	PrimaryAddr() string
}

// PrimaryPosition reads the primary's GTID position: one variable, no
// table. SHOW GLOBAL VARIABLES rather than SELECT @@: the same read, and the
// primary's Com_select keeps counting only real queries (the relay sends the
// primary none in steady state). Empty when the primary has GTIDs off.
func PrimaryPosition(ctx context.Context, db *sql.DB, flavor string) (string, error) {
	name := "gtid_binlog_pos"
	if flavor == binlog.FlavorMySQL {
		name = "gtid_executed"
	}
	var n, v sql.NullString
	err := db.QueryRowContext(ctx, "SHOW GLOBAL VARIABLES LIKE '"+name+"'").Scan(&n, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the primary's GTID position: %w", err)
	}
	return strings.ReplaceAll(v.String, "\n", ""), nil
}

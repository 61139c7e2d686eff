package main

// The bench runs on every flavour of the stack (scripts/stack.sh). The
// statements that differ between MariaDB and MySQL 9 come from
// testenv.Current, the flavour RELAY_TEST_FLAVOR names (make bench sets it
// from BENCH_FLAVOR, with the flavour's addresses), so every step sends
// the same statements in each server's own words and prints the same
// figures on both.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// primaryPos reads what the primary has logged (gtid_binlog_pos on
// MariaDB, gtid_executed on MySQL), counted as one of the bench's own
// statements on the primary like every other.
func (e *env) primaryPos(ctx context.Context) (string, error) {
	e.ownStmts.note("SELECT @@" + testenv.Current.GTIDVar())
	pos, err := testenv.Current.GTIDPos(ctx, e.primary.DB)
	if err != nil {
		return "", fmt.Errorf("reading the primary's GTID position (@@%s): %w", testenv.Current.GTIDVar(), err)
	}
	return pos, nil
}

// waitApplied waits up to within for db (a replica) to have applied pos:
// MASTER_GTID_WAIT on MariaDB, WAIT_FOR_EXECUTED_GTID_SET on MySQL.
func waitApplied(ctx context.Context, db *sql.DB, pos string, within time.Duration) error {
	return testenv.Current.WaitApplied(ctx, db, pos, within)
}

// stackInfo is what a run ran on, for the report's header: the flavour,
// each server's VERSION() and what the broker says it is.
type stackInfo struct {
	flavor           string
	primary, replica string
	broker           string
}

// header is the report's first lines: comments (#), so that every other
// line stays a `name value unit` figure.
func (s stackInfo) header() []string {
	return []string{
		"# flavour " + s.flavor,
		"# server primary " + s.primary + ", replica " + s.replica,
		"# broker " + s.broker,
	}
}

// serverVersion reads db's VERSION() and checks that it is the flavour's
// kind of server: a MySQL DSN run with the MariaDB flavour's statements
// (or the other way round) would fail half-way, on a statement one of them
// does not know.
func serverVersion(ctx context.Context, db *sql.DB, flag string) (string, error) {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "", fmt.Errorf("%s: reading VERSION(): %w", flag, err)
	}
	if mariadb := strings.Contains(strings.ToLower(v), "mariadb"); mariadb == testenv.Current.MySQL {
		return "", fmt.Errorf("%s is a server %s, not of the flavour %s (RELAY_TEST_FLAVOR): make bench BENCH_FLAVOR=<flavour> sets both", flag, v, testenv.Current.Name)
	}
	return v, nil
}

// brokerVersion is the product and version the broker announced when
// conn was opened (connection.start's server properties).
func brokerVersion(conn *amqp.Connection) string {
	product, _ := conn.Properties["product"].(string)
	version, _ := conn.Properties["version"].(string)
	if product == "" && version == "" {
		return "unknown"
	}
	return strings.TrimSpace(product + " " + version)
}

// bulkParams are the session settings of the bulk connection of the
// large-payload step. MariaDB logs each statement's text beside its row
// events (binlog_annotate_row_events): for those statements that would
// double the gigabytes every server's binlog takes, and the relay reads
// only the row events. MySQL's counterpart, binlog_rows_query_log_events,
// is off by default, and MySQL refuses binlog_annotate_row_events as an
// unknown variable.
func bulkParams() map[string]string {
	if testenv.Current.MySQL {
		return nil
	}
	return map[string]string{"binlog_annotate_row_events": "0"}
}

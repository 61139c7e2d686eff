package preflight

// The start-up checks of the source and the primary: settings, grants,
// tables, and the binlog stream at the start position (broker.go checks
// the broker).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/replica"
	"github.com/binlog-relay/binlog-relay/internal/sourceinfo"
	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func variable(ctx context.Context, db *sql.DB, name string) (string, bool) {
	var v sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT @@"+name).Scan(&v); err != nil {
		return "", false
	}
	return v.String, true
}

// checkSource returns false when the source cannot be reached at all.
func (c *checker) checkSource(ctx context.Context) bool {
	s := c.s
	where := "source " + s.SourceConfig().Addr()
	if err := s.Source.PingContext(ctx); err != nil {
		c.add(Error, where, "cannot connect as %s: %v", s.SourceConfig().User, sourceinfo.Explain(err))
		return false
	}
	flavor, err := s.Flavor(ctx)
	if err != nil {
		c.add(Error, where, "%v", err)
		return false
	}
	if v, _ := variable(ctx, s.Source, "log_bin"); v != "1" && !strings.EqualFold(v, "ON") {
		c.add(Error, where, "binary logging is off: start the server with log_bin (and binlog_format=ROW)")
		return true
	}
	if v, _ := variable(ctx, s.Source, "binlog_format"); !strings.EqualFold(v, "ROW") {
		c.add(Error, where, "binlog_format is %s: set binlog_format=ROW (outbox rows are read from row events)", v)
	}
	if v, _ := variable(ctx, s.Source, "binlog_row_image"); !strings.EqualFold(v, "FULL") {
		c.add(Error, where, "binlog_row_image is %s: set binlog_row_image=FULL so every outbox column is in the binlog", v)
	}
	if v, ok := variable(ctx, s.Source, "binlog_row_metadata"); !ok || !strings.EqualFold(v, "FULL") {
		c.add(Warning, where, "binlog_row_metadata is %q: set binlog_row_metadata=FULL so column names come with each row (otherwise they are read from information_schema and re-read after DDL)", v)
	}
	if s.isReplica(ctx) {
		v, ok := variable(ctx, s.Source, "log_slave_updates")
		if !ok {
			v, _ = variable(ctx, s.Source, "log_replica_updates")
		}
		if v != "1" && !strings.EqualFold(v, "ON") {
			c.add(Error, where, "the source is a replica with log_slave_updates off: rows replicated from the primary never reach its binlog; set log_slave_updates=ON (log_replica_updates on MySQL 8)")
		}
		if flavor == binlog.FlavorMySQL {
			c.checkApplierOrder(ctx, where)
		}
	}
	if v, err := sourceinfo.CompressionSetting(ctx, s.Source); err == nil && v != "" {
		// Compressed transactions arrive as TRANSACTION_PAYLOAD events,
		// which the reader decodes; reported so the setting is known.
		c.add(Info, where, "binlog_transaction_compression is %s (compressed transactions are decoded)", v)
	}
	if v, ok := variable(ctx, s.Source, "global.binlog_row_value_options"); ok && strings.Contains(strings.ToUpper(v), "PARTIAL_JSON") {
		// The server logs JSON_SET/JSON_REPLACE/JSON_REMOVE updates as diffs
		// against the before image (PARTIAL_UPDATE_ROWS_EVENT); the reader
		// applies them (pkg/binlog partialjson.go). Sessions may set it
		// too, so this is only what the global says.
		c.add(Info, where, "binlog_row_value_options is PARTIAL_JSON (global): JSON updates by JSON_SET, JSON_REPLACE and JSON_REMOVE are logged as diffs, "+
			"which the relay applies to the full before image (binlog_row_image=FULL) to publish the document as committed; "+
			"a diff it cannot apply stops the relay, saying so (SET PERSIST binlog_row_value_options = '' turns the setting off)")
	}
	if flavor == binlog.FlavorMySQL {
		if v, _ := variable(ctx, s.Source, "gtid_mode"); !strings.EqualFold(v, "ON") {
			c.add(Warning, where, "gtid_mode is %s: the relay resumes by file/position and cannot fail over between replicas; set gtid_mode=ON and enforce_gtid_consistency=ON", v)
		}
	}
	c.checkGrants(ctx, where, s.Source, []grantNeed{
		{privs: []string{"REPLICATION SLAVE", "REPLICATION REPLICA"}, why: "to stream the binlog"},
		{privs: []string{"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}, why: "to read the binlog position (SHOW MASTER STATUS)"},
	})
	c.checkTables(ctx, where, s.Source, s.Config.Tables, "SELECT", func(t *outbox.Table) string {
		return "SELECT 1 FROM " + outboxsql.QuotedName(t) + " LIMIT 0"
	})
	c.checkMessageIDIndexes(ctx, where, s.Source, s.Config.Tables)
	return true
}

// checkApplierOrder refuses a MySQL source replica whose multi-threaded
// applier may commit in another order than the primary did: with
// replica_parallel_workers > 1 and replica_preserve_commit_order OFF,
// workers commit independent transactions as they finish, so the replica's
// binlog (which the relay reads) holds them in its own order, and the relay
// would publish out of the primary's commit order (invariant 4). MySQL
// 8.0.27+ defaults to 4 workers with the order preserved. MariaDB's parallel
// replication always commits in order within a GTID domain.
func (c *checker) checkApplierOrder(ctx context.Context, where string) {
	workers, ok := variable(ctx, c.s.Source, "replica_parallel_workers")
	preserve, _ := variable(ctx, c.s.Source, "replica_preserve_commit_order")
	if !ok { // before MySQL 8.0.26
		workers, _ = variable(ctx, c.s.Source, "slave_parallel_workers")
		preserve, _ = variable(ctx, c.s.Source, "slave_preserve_commit_order")
	}
	n, err := strconv.Atoi(workers)
	if err != nil || n <= 1 {
		return
	}
	if preserve != "1" && !strings.EqualFold(preserve, "ON") {
		c.add(Error, where, "the source replica applies with replica_parallel_workers=%d and replica_preserve_commit_order OFF: its binlog may hold transactions in another order than the primary committed them, and the relay would publish them out of commit order; SET GLOBAL replica_preserve_commit_order=ON (after STOP REPLICA SQL_THREAD) or replica_parallel_workers=1", n)
		return
	}
	c.add(Info, where, "multi-threaded applier (replica_parallel_workers=%d) with replica_preserve_commit_order ON: the replica commits in the primary's order", n)
}

// isReplica reports whether the source replicates from another server.
func (s *Servers) isReplica(ctx context.Context) bool {
	if s.IsReplica != nil {
		return s.IsReplica(ctx)
	}
	st, err := replica.ReadState(ctx, s.Source, "")
	return err == nil && st.IsReplica
}

type grantNeed struct {
	privs []string // any of these
	why   string
}

// checkGrants reads SHOW GRANTS for the relay's own user and reports each
// missing global privilege.
func (c *checker) checkGrants(ctx context.Context, where string, db *sql.DB, needs []grantNeed) {
	var global []string
	err := sqlrows.Each(ctx, db, "SHOW GRANTS", nil, func(rs *sql.Rows, _ []*sql.ColumnType) error {
		var g string
		if err := rs.Scan(&g); err != nil {
			return err
		}
		if g = strings.ToUpper(g); strings.Contains(g, " ON *.* ") {
			global = append(global, g)
		}
		return nil
	})
	if err != nil {
		c.add(Warning, where, "cannot read the relay user's grants: %v", err)
		return
	}
	for _, need := range needs {
		if !hasAnyGrant(global, need.privs) {
			c.add(Error, where, "the relay user lacks %s %s: GRANT %s ON *.* TO the relay user", need.privs[0], need.why, need.privs[0])
		}
	}
}

func hasAnyGrant(global []string, privs []string) bool {
	for _, g := range global {
		if strings.Contains(g, "ALL PRIVILEGES") {
			return true
		}
		for _, p := range privs {
			if strings.Contains(g, p) {
				return true
			}
		}
	}
	return false
}

// checkTables verifies each outbox table exists with its mapped columns and
// that the statement the relay needs is allowed.
func (c *checker) checkTables(ctx context.Context, where string, db *sql.DB, tables []*outbox.Table, priv string, probe func(*outbox.Table) string) {
	for _, t := range tables {
		cols, err := tableColumns(ctx, db, t)
		if err != nil {
			c.add(Error, where, "reading columns of %s: %v", t.FullName(), err)
			continue
		}
		if len(cols) == 0 {
			c.add(Error, where, "outbox table %s does not exist (or the relay user cannot see it): create it (schema/) or fix tables[].schema/name", t.FullName())
			continue
		}
		for field, col := range t.MappedColumns() {
			if !cols[strings.ToLower(col)] {
				c.add(Error, where, "outbox table %s has no column %q (mapped by %s): fix the mapping or the table", t.FullName(), col, field)
			}
		}
		if _, err := db.ExecContext(ctx, probe(t)); err != nil {
			c.add(Error, where, "the relay user cannot %s on %s: GRANT %s ON %s TO the relay user (%v)", priv, t.FullName(), priv, outboxsql.QuotedName(t), err)
		}
	}
}

func tableColumns(ctx context.Context, db *sql.DB, t *outbox.Table) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", t.Schema, t.Name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		cols[strings.ToLower(n)] = true
	}
	return cols, rows.Err()
}

// checkStream opens the binlog stream at the start position and reads the
// first events: this is what proves the replication grant, and it tells
// whether a saved checkpoint is still on the server.
func (c *checker) checkStream(ctx context.Context) {
	s := c.s
	src := s.SourceConfig()
	where := "source " + src.Addr()
	start, resumed, err := s.StartPosition(ctx)
	if err != nil {
		c.add(Error, where, "finding the start position: %v", err)
		return
	}
	if !resumed {
		if what := c.lostCheckpoint(ctx); what != "" {
			c.checkGap("checkpoint", what)
		}
	}
	stls, err := src.TLSConfig("source")
	if err != nil {
		c.add(Error, where, "%v", err)
		return
	}
	password, tokens, err := s.BinlogPassword(ctx, src)
	if err == nil && tokens != nil {
		password, err = tokens(ctx, src.Addr())
	}
	if err != nil {
		c.add(Error, where, "%v", err)
		return
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 100000 + uint32(time.Now().UnixNano()%1000000), Flavor: start.Flavor,
		Host: src.Host, Port: uint16(src.Port), User: src.User,
		Password: password, TLSConfig: stls, DisableRetrySync: true,
		Logger: slog.New(slog.DiscardHandler),
	})
	defer syncer.Close()
	var set mysql.GTIDSet
	if start.HasGTID() {
		var perr error
		if set, perr = parseStartSet(start); perr != nil {
			c.add(Error, "checkpoint", "the saved GTID set %q does not parse: %v; delete key %s to start from the current position", start.GTIDSet, perr, s.Config.Checkpoint.Key)
			return
		}
	}
	streamer, err := sourceinfo.StartSync(syncer, set, start.File, start.Pos)
	if err == nil {
		probeCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		// Read past the fake rotate and format description; an error packet
		// (access, purged log) arrives before or instead of them.
		for i := 0; i < 3 && err == nil; i++ {
			_, err = streamer.GetEvent(probeCtx)
		}
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			err = nil // idle server: the stream is open
		}
	}
	if err == nil {
		return
	}
	var myErr *mysql.MyError
	switch {
	case errors.As(err, &myErr) && myErr.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG && resumed && sourceinfo.IsPurgedMessage(myErr.Message):
		c.checkGap(where, fmt.Sprintf("the saved checkpoint (%s) is no longer in the source's binlog (purged: %s)", start, myErr.Message))
	case errors.As(err, &myErr) && (myErr.Code == mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR || myErr.Code == mysql.ER_ACCESS_DENIED_ERROR):
		c.add(Error, where, "the relay user may not stream the binlog: GRANT REPLICATION SLAVE ON *.* TO the relay user (%s)", myErr.Message)
	default:
		c.add(Error, where, "opening the binlog stream at %s: %v", start, err)
	}
}

func (c *checker) checkPrimary(ctx context.Context) {
	s := c.s
	where := "primary " + s.Config.Primary.Addr()
	if err := s.Primary.PingContext(ctx); err != nil {
		c.add(Error, where, "cannot connect as %s: %v", s.Config.Primary.User, sourceinfo.Explain(err))
		return
	}
	var written []*outbox.Table
	for _, t := range s.Config.Tables {
		if t.Columns.Status != "" {
			written = append(written, t)
		}
	}
	// A statement that matches nothing: it proves the UPDATE grant and
	// writes nothing (no binlog event either).
	c.checkTables(ctx, where, s.Primary, written, "UPDATE", func(t *outbox.Table) string {
		return fmt.Sprintf("UPDATE %[1]s SET %[2]s = %[2]s WHERE 1 = 0", outboxsql.QuotedName(t), ident.Quote(t.Columns.Status))
	})
	if len(written) > 0 {
		c.checkMarkImage(ctx, where) // markimage.go
	}
}

// parseStartSet reads a start position's GTID set for go-mysql's syncer, in
// the flavour's canonical form (binlog.NormalizeGTIDSet).
func parseStartSet(p binlog.Position) (mysql.GTIDSet, error) {
	norm, err := binlog.NormalizeGTIDSet(p.Flavor, p.GTIDSet)
	if err != nil {
		return nil, err
	}
	return mysql.ParseGTIDSet(p.Flavor, norm)
}

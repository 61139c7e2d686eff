package preflight

// The start-up check of the source's binlog retention. The relay resumes
// from its checkpoint only while the source still has that binlog; once it
// is purged, the position is a gap (internal/startpos): the rows
// committed in it go to the sweeper, and tables without a status column
// stop the relay. So `check` warns when the source keeps its binlog for
// less than source.min_binlog_retention (24h by default): a relay stopped
// or stuck for that long can no longer resume where it was.
//
// Which setting decides, by server:
//   - RDS and Aurora: 'binlog retention hours' in mysql.rds_configuration
//     (NULL: RDS keeps binlogs 0 hours; Aurora removes them lazily, usually
//     within a day). https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/mysql-stored-proc-configuring.html
//   - MySQL 8.0.29+: nothing, with binlog_expire_logs_auto_purge=OFF.
//   - MySQL 8+ and MariaDB 10.6+: binlog_expire_logs_seconds when not 0;
//     MySQL 8.0 then ignores expire_logs_days, and MariaDB keeps the two in
//     step (expire_logs_days is the same figure in days).
//   - MySQL 5.7, 8.0 with binlog_expire_logs_seconds=0, MariaDB before
//     10.6: expire_logs_days (MySQL 8.4 removed it).
//   - 0 everywhere: never purged by time.
//     https://dev.mysql.com/doc/refman/8.0/en/replication-options-binary-log.html#sysvar_binlog_expire_logs_seconds
//     https://mariadb.com/kb/en/replication-and-binary-log-system-variables/#binlog_expire_logs_seconds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// retentionSource is what the retention is read from: the source's
// variables and RDS's configuration table. sqlRetention reads a server;
// tests pass a fake.
type retentionSource interface {
	// Variable reads a global variable; false when the server has none of
	// that name.
	Variable(ctx context.Context, name string) (string, bool)
	// RDSRetentionHours reads 'binlog retention hours'. found is false
	// where mysql.rds_configuration is not there (not RDS) or cannot be
	// read, err then says why if it may be there.
	RDSRetentionHours(ctx context.Context) (hours sql.NullString, found bool, err error)
}

// binlogRetention is how long a server keeps its binlog.
type binlogRetention struct {
	keep    time.Duration // when neither never nor lazy
	never   bool          // not purged by time
	lazy    bool          // Aurora with 'binlog retention hours' NULL: no figure
	rds     bool          // decided by mysql.rds_configuration
	setting string        // what decides it, as the server says it
}

// readRetention reads the retention of the source; false when the server
// says nothing about it (no variable known here).
func readRetention(ctx context.Context, s retentionSource) (binlogRetention, bool, error) {
	_, aurora := s.Variable(ctx, "aurora_version")
	hours, found, err := s.RDSRetentionHours(ctx)
	switch {
	case err != nil:
		return binlogRetention{}, false, err
	case found && !hours.Valid:
		if aurora {
			return binlogRetention{lazy: true, rds: true, setting: "binlog retention hours is NULL"}, true, nil
		}
		return binlogRetention{rds: true, setting: "binlog retention hours is NULL, which RDS treats as 0 hours"}, true, nil
	case found:
		if h, perr := strconv.ParseFloat(strings.TrimSpace(hours.String), 64); perr == nil && h >= 0 {
			return binlogRetention{keep: time.Duration(h * float64(time.Hour)), rds: true,
				setting: "binlog retention hours=" + strings.TrimSpace(hours.String) + " in mysql.rds_configuration"}, true, nil
		}
	}
	if v, ok := s.Variable(ctx, "binlog_expire_logs_auto_purge"); ok && (v == "0" || strings.EqualFold(v, "OFF")) {
		return binlogRetention{never: true, setting: "binlog_expire_logs_auto_purge=OFF"}, true, nil
	}
	secs, hasSecs := s.Variable(ctx, "binlog_expire_logs_seconds")
	days, hasDays := s.Variable(ctx, "expire_logs_days")
	if n, err := strconv.ParseUint(secs, 10, 64); hasSecs && err == nil && n > 0 {
		return binlogRetention{keep: time.Duration(n) * time.Second, setting: "binlog_expire_logs_seconds=" + secs}, true, nil
	}
	if d, err := strconv.ParseFloat(days, 64); hasDays && err == nil && d > 0 {
		// MariaDB 10.6+ shows days with six decimals (0.041667 for
		// 3600 s); whole seconds are what it applies.
		keep := time.Duration(math.Round(d*86400)) * time.Second
		return binlogRetention{keep: keep, setting: "expire_logs_days=" + days}, true, nil
	}
	var zero []string
	if hasSecs {
		zero = append(zero, "binlog_expire_logs_seconds="+secs)
	}
	if hasDays {
		zero = append(zero, "expire_logs_days="+days)
	}
	if len(zero) == 0 {
		return binlogRetention{}, false, nil
	}
	return binlogRetention{never: true, setting: strings.Join(zero, ", ")}, true, nil
}

// judgeRetention is what `check` says of a retention against the floor:
// a Warning below it, an Info when binlogs are never purged by time,
// nothing when they are kept long enough.
func judgeRetention(r binlogRetention, floor time.Duration, flavor string) (Severity, string) {
	const why = "a relay stopped or stuck for longer than that cannot resume from its checkpoint (the position is purged), " +
		"and the rows committed meanwhile are then left to the sweeper (a table without a status column stops the relay; docs/operating.md, Gaps)"
	floorText := fmt.Sprintf("source.min_binlog_retention (%s)", retentionSpan(floor))
	switch {
	case r.never:
		return Info, fmt.Sprintf("the binlog is never purged by time (%s): only PURGE BINARY LOGS removes it; mind the disk", r.setting)
	case r.lazy:
		return Warning, fmt.Sprintf("%s: Aurora removes binlogs lazily, usually within a day, with no figure to hold to, "+
			"so not for certain as long as %s; %s. Set it: %s", r.setting, floorText, why, raiseRetention(r, floor, flavor))
	case r.keep < floor:
		return Warning, fmt.Sprintf("binlog retention is %s (%s), under %s: %s. Raise it: %s (or lower source.min_binlog_retention; 0s turns this check off)",
			retentionSpan(r.keep), r.setting, floorText, why, raiseRetention(r, floor, flavor))
	}
	return "", ""
}

// raiseRetention says how to keep the binlog for floor.
func raiseRetention(r binlogRetention, floor time.Duration, flavor string) string {
	secs := int64(math.Ceil(floor.Seconds()))
	switch {
	case r.rds:
		return fmt.Sprintf("CALL mysql.rds_set_configuration('binlog retention hours', %d)", int64(math.Ceil(floor.Hours())))
	case strings.HasPrefix(r.setting, "expire_logs_days"):
		return fmt.Sprintf("expire_logs_days = %d in the server's option file (and SET GLOBAL)", int64(math.Ceil(floor.Hours()/24)))
	case flavor == binlog.FlavorMySQL:
		return fmt.Sprintf("SET PERSIST binlog_expire_logs_seconds = %d", secs)
	}
	return fmt.Sprintf("SET GLOBAL binlog_expire_logs_seconds = %d, and the same in the server's option file", secs)
}

// retentionSpan renders a retention briefly: 30m, 1h, 36h, 7d.
func retentionSpan(d time.Duration) string {
	if d >= 48*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	if d == 0 {
		return "0h"
	}
	return span(d) // timezone.go
}

// checkRetention warns when the source keeps its binlog for less than
// source.min_binlog_retention.
func (c *checker) checkRetention(ctx context.Context, flavor string) {
	sv := c.s
	floor := sv.Config.Source.BinlogRetentionFloor()
	if floor == 0 {
		return
	}
	where := "source " + sv.SourceConfig().Addr()
	s := sqlRetention{db: sv.Source}
	r, ok, err := readRetention(ctx, s)
	switch {
	case err != nil && s.managed(ctx):
		c.add(Warning, where, "cannot read 'binlog retention hours' (%v): on RDS and Aurora it decides how long the binlog is kept; "+
			"GRANT SELECT ON mysql.rds_configuration TO the relay user, or read it with CALL mysql.rds_show_configuration", err)
		return
	case err != nil:
		// Not RDS as far as can be told: a user without rights on the
		// mysql schema is refused whether the table exists or not.
		sv.Log.Debug("mysql.rds_configuration cannot be read; taking the server's variables", zap.Error(err))
		if r, ok, err = readRetention(ctx, noRDS{s}); err != nil {
			return
		}
	}
	if !ok {
		sv.Log.Debug("the source shows no binlog retention setting")
		return
	}
	if sev, text := judgeRetention(r, floor, flavor); sev != "" {
		c.add(sev, where, "%s", text)
	}
}

// sqlRetention reads a server's retention settings.
type sqlRetention struct{ db *sql.DB }

func (s sqlRetention) Variable(ctx context.Context, name string) (string, bool) {
	return variable(ctx, s.db, name) // servers.go
}

// MySQL error numbers RDSRetentionHours tells apart.
const (
	erNoSuchTable     = 1146 // ER_NO_SUCH_TABLE
	erTableAccess     = 1142 // ER_TABLEACCESS_DENIED_ERROR
	erNoSuchProc      = 1305 // ER_SP_DOES_NOT_EXIST
	erProcAccess      = 1370 // ER_PROCACCESS_DENIED_ERROR
	retentionHoursKey = "binlog retention hours"
)

func (s sqlRetention) RDSRetentionHours(ctx context.Context) (sql.NullString, bool, error) {
	var v sql.NullString
	err := s.db.QueryRowContext(ctx, "SELECT value FROM mysql.rds_configuration WHERE name = ?", retentionHoursKey).Scan(&v)
	switch {
	case err == nil:
		return v, true, nil
	case errors.Is(err, sql.ErrNoRows), mysqlErr(err) == erNoSuchTable:
		return v, false, nil
	case mysqlErr(err) != erTableAccess:
		return v, false, err
	}
	// The table is refused: the procedure may be granted where it is not.
	v, found, perr := s.showConfiguration(ctx)
	switch {
	case perr == nil:
		return v, found, nil
	case mysqlErr(perr) == erNoSuchProc:
		return v, false, nil
	case mysqlErr(perr) == erProcAccess:
		return v, false, err // the table's refusal says what to grant
	}
	return v, false, perr
}

// showConfiguration reads the row out of CALL mysql.rds_show_configuration
// (name, value, description).
func (s sqlRetention) showConfiguration(ctx context.Context) (sql.NullString, bool, error) {
	rows, err := s.db.QueryContext(ctx, "CALL mysql.rds_show_configuration")
	if err != nil {
		return sql.NullString{}, false, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return sql.NullString{}, false, err
	}
	for rows.Next() {
		vals, err := sqlrows.ScanText(rows, len(cols))
		if err != nil {
			return sql.NullString{}, false, err
		}
		if len(vals) >= 2 && vals[0].String == retentionHoursKey {
			return vals[1], true, nil
		}
	}
	return sql.NullString{}, false, rows.Err()
}

// managed tells whether the server looks like RDS or Aurora: Aurora has
// @@aurora_version; RDS for MySQL and MariaDB install under /rdsdbbin.
func (s sqlRetention) managed(ctx context.Context) bool {
	if _, ok := s.Variable(ctx, "aurora_version"); ok {
		return true
	}
	dir, _ := s.Variable(ctx, "basedir")
	return strings.HasPrefix(dir, "/rdsdbbin")
}

// noRDS is a source read without mysql.rds_configuration.
type noRDS struct{ retentionSource }

func (noRDS) RDSRetentionHours(context.Context) (sql.NullString, bool, error) {
	return sql.NullString{}, false, nil
}

// mysqlErr is the server's error number in err, 0 if none.
func mysqlErr(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

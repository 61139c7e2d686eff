package preflight

// The start-up check of the servers' clocks: the primary's time zone (its
// sessions write DATETIME columns in it) against the source replica's
// (where the sweeper's pre-checks, `status` and the backlog metrics read
// them), and against each table's route.time_zone (in which the binlog
// path reads them). internal/sweeper/clock.go says why it matters.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// checkTimeZones compares the time zones of the relay's sessions on the
// primary and on the source. Where they differ it says what the sweeper
// does about it; an offset the source cannot take as a session time_zone
// cannot be corrected, and stops a relay that sweeps.
func (c *checker) checkTimeZones(ctx context.Context) {
	s := c.s
	where := "source " + s.SourceConfig().Addr()
	if s.Primary.PingContext(ctx) != nil {
		return // checkPrimary said so
	}
	primary, err := sweeper.ReadClock(ctx, s.Primary)
	if err != nil {
		c.add(Warning, "primary "+s.Config.Primary.Addr(), "cannot compare its time zone with the source's: %v", err)
		return
	}
	source, err := sweeper.ReadClock(ctx, s.Source)
	if err != nil {
		c.add(Warning, where, "cannot compare its time zone with the primary's: %v", err)
		return
	}
	if primary.SameZone(source) {
		return
	}
	zone, exact := sweeper.PrecheckZone(primary, source, time.Now())
	diff := primary.Offset() - source.Offset()
	shift, effect := span(diff)+" ahead of", span(diff)+" late"
	switch {
	case diff < 0:
		shift, effect = span(-diff)+" behind", span(-diff)+" early"
	case diff == 0: // one offset now, not all year (other DST rules)
		shift, effect = "now the same as, but not all year as", "late or early for part of the year"
	}
	what := fmt.Sprintf("the primary's clock is in another time zone than the source replica's: the primary reads %s, the replica %s. "+
		"DATETIME columns the primary fills (create_time, next_retry_time, update_time: DEFAULT CURRENT_TIMESTAMP, the relay's NOW(3)) "+
		"hold its wall clock, %s the replica's NOW()", primary, source, shift)
	if refusal := takesZone(ctx, s, zone); refusal != "" {
		sev := Warning
		if s.Config.SweeperEnabled() {
			sev = Error
		}
		c.add(sev, where, "%s, and the sweeper's pre-checks cannot run in the primary's zone: %s; "+
			"rows would be due by the replica's clock, %s. Run both servers in one time_zone", what, refusal, effect)
		return
	}
	text := fmt.Sprintf("%s. The sweeper's pre-checks on the replica run in the primary's zone (SET time_zone = '%s' in their session), "+
		"so rows are due by the primary's clock, not %s; `status` and binlog_relay_outbox_oldest_pending_age_seconds still age rows "+
		"by the replica's clock. Running both servers in one time_zone avoids that", what, zone, effect)
	if !exact {
		text += "; the primary's SYSTEM zone also changes offset during the year (DST), which the sweeper reads again only every hour, " +
			"so for up to an hour after a change rows can be swept late or early: a named time_zone or a fixed offset on the primary avoids that"
	}
	c.add(Warning, where, "%s", text)
}

// checkRouteZones warns about each table with DATETIME columns whose
// route.time_zone is not the primary's zone. A DATETIME holds the wall
// clock of the session that wrote it, on the primary (DEFAULT
// CURRENT_TIMESTAMP, NOW(), the relay's NOW(3) + backoff); the binlog path
// reads it in route.time_zone, so with another zone it takes the times for
// other instants: a re-queue's next_retry_time is judged hours early or
// late against the commit, and the times in headers are off by as much.
func (c *checker) checkRouteZones(ctx context.Context) {
	s := c.s
	if s.Primary.PingContext(ctx) != nil {
		return // checkPrimary said so
	}
	primary, err := sweeper.ReadClock(ctx, s.Primary)
	if err != nil {
		return // checkTimeZones says so
	}
	for i, t := range s.Config.Tables {
		if primary.SameAs(t.Location()) {
			continue
		}
		cols, err := datetimeColumns(ctx, s.Primary, t)
		if err != nil || len(cols) == 0 {
			continue // reported by checkTables, or nothing read in the zone
		}
		zone := t.Route.TimeZone
		if zone == "" {
			zone = "unset (UTC)"
		}
		fix := "the IANA zone of the primary's clock"
		if z := primary.IANAZone(); z != "" {
			fix = z
		}
		c.add(Warning, "primary "+s.Config.Primary.Addr(), "tables[%d].route.time_zone is %s, but the primary's clock reads %s: "+
			"the DATETIME columns of %s (%s) hold the primary's wall clock and the relay reads them in route.time_zone, "+
			"so a re-queued row's next_retry_time is judged against the wrong instant (published early, or left to the sweeper) "+
			"and the times in headers are off by the difference; set tables[%d].route.time_zone to %s",
			i, zone, primary, t.FullName(), strings.Join(cols, ", "), i, fix)
	}
}

// datetimeColumns lists the columns of t's mapping that are DATETIME on db,
// sorted.
func datetimeColumns(ctx context.Context, db *sql.DB, t *outbox.Table) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND DATA_TYPE = 'datetime'",
		t.Schema, t.Name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	datetime := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		datetime[strings.ToLower(n)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, col := range t.MappedColumns() {
		if lc := strings.ToLower(col); datetime[lc] && !seen[lc] {
			seen[lc] = true
			out = append(out, col)
		}
	}
	sort.Strings(out)
	return out, nil
}

// takesZone tries zone as a session time_zone on one source connection,
// which it then drops, and says why the source cannot take it ("": it
// can, or that is not known for another reason).
func takesZone(ctx context.Context, s *Servers, zone string) string {
	if zone == "" {
		return "the primary's offset from UTC is not a whole number of minutes"
	}
	conn, err := s.Source.Conn(ctx)
	if err != nil {
		return ""
	}
	defer conn.Close()
	defer func() { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }() // drop the session
	_, err = conn.ExecContext(ctx, "SET time_zone = '"+zone+"'")
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return fmt.Sprintf("the source refuses time_zone '%s' (%v)", zone, err)
	}
	return ""
}

// span renders a positive offset difference briefly: 9h, 5h45m, 30m.
func span(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

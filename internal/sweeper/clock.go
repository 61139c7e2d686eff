package sweeper

// Clocks: whose NOW() a due row is judged by.
//
// The sweeper's conditions compare columns with NOW(3): create_time with
// the grace period, next_retry_time, update_time with the zombie timeout,
// the archive's retention. A DATETIME has no zone: it holds the wall clock
// of the session that wrote it, on the primary (the application's DEFAULT
// CURRENT_TIMESTAMP, the relay's NOW(3) + backoff). The claims run on the
// primary and agree with it; the pre-checks run on the replica, whose NOW()
// is its own zone's wall clock. With the primary at +09:00 and the replica
// at UTC, a row due now on the primary looks due in nine hours on the
// replica (issue 26). A TIMESTAMP column is stored in UTC and read in the
// session's zone, so any session agrees with itself; an epoch column does
// not depend on zones at all.
//
// So the sweeper reads the primary's zone at its first round (again only
// where a SYSTEM zone with DST can change it: precheck.go), and each
// pre-check also reads its own session's offset from UTC. When the two
// differ, the pre-check is run again in a session set to the primary's
// offset (SET time_zone = '+09:00'): its NOW() is then the primary's wall
// clock, and TIMESTAMP columns are read in that zone too, so every column
// type is judged as the claim will judge it. Where the zones agree nothing
// changes: one statement per look, as before.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// probeDays are the days from now at which a clock's offset is read: now
// and three more a quarter of a year apart, so a zone that changes offset
// during the year (daylight saving time) shows a second offset.
var probeDays = [4]int{0, 91, 182, 273}

// Clock is how a server's session tells time: its time_zone setting and
// its offset from UTC now and at the probe days.
type Clock struct {
	TimeZone   string // @@session.time_zone: SYSTEM, +09:00, Asia/Tokyo
	SystemZone string // @@system_time_zone, what SYSTEM means (an abbreviation: JST, CET)
	// Offsets from UTC now and at the probes (probeDays).
	Offsets [len(probeDays)]time.Duration
	ReadAt  time.Time // by the relay's clock
}

// clockSQL reads a Clock. FROM_UNIXTIME renders a later instant in the
// session's zone (by the server's own rules: its tz tables or the system's
// zone), so the difference from the UTC wall clock is the offset then.
var clockSQL = func() string {
	q := "SELECT @@session.time_zone, @@system_time_zone, TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())"
	for _, d := range probeDays[1:] {
		q += fmt.Sprintf(", TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP() + INTERVAL %d DAY, FROM_UNIXTIME(UNIX_TIMESTAMP() + %d))", d, d*86400)
	}
	return q
}()

// offsetSQL is the session's offset from UTC now, in seconds; each
// pre-check reads it beside its answer.
const offsetSQL = "TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())"

// rowQuerier is *sql.DB or *sql.Conn.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ReadClock reads the time zone of one of db's sessions (a pool's sessions
// all start in the server's global time_zone, unless the DSN sets one).
func ReadClock(ctx context.Context, db rowQuerier) (Clock, error) {
	c := Clock{ReadAt: time.Now()}
	var tz, sys sql.NullString
	var secs [len(probeDays)]int64
	dest := []any{&tz, &sys}
	for i := range secs {
		dest = append(dest, &secs[i])
	}
	if err := db.QueryRowContext(ctx, clockSQL).Scan(dest...); err != nil {
		return c, fmt.Errorf("reading the time zone: %w", err)
	}
	c.TimeZone, c.SystemZone = tz.String, sys.String
	for i, s := range secs {
		c.Offsets[i] = time.Duration(s) * time.Second
	}
	return c, nil
}

// Offset is the offset from UTC when the clock was read.
func (c Clock) Offset() time.Duration { return c.Offsets[0] }

// Steady reports whether the zone keeps one offset all year.
func (c Clock) Steady() bool {
	for _, o := range c.Offsets[1:] {
		if o != c.Offsets[0] {
			return false
		}
	}
	return true
}

// SameZone reports whether c and o tell the same wall-clock time now and
// at every probe: then NOW() on either is the same value, DST included.
func (c Clock) SameZone(o Clock) bool { return c.Offsets == o.Offsets }

func (c Clock) String() string {
	s := FormatOffset(c.Offset())
	if s == "" {
		s = c.Offset().String()
	}
	if c.TimeZone == "SYSTEM" {
		return fmt.Sprintf("%s (time_zone SYSTEM, system_time_zone %s)", s, c.SystemZone)
	}
	return fmt.Sprintf("%s (time_zone %s)", s, c.TimeZone)
}

// Location is the zone whose offset the clock has at any instant: a fixed
// offset when it is steady; the named time_zone from Go's zone database
// (embedded, pkg/outbox) when that agrees with the server at every probe,
// so DST changes are followed when they happen. nil when neither holds (a
// SYSTEM zone with DST: its abbreviation names no zone), and the offset is
// only known as read.
func (c Clock) Location() *time.Location {
	if c.Steady() {
		return time.FixedZone(FormatOffset(c.Offset()), int(c.Offset()/time.Second))
	}
	if c.TimeZone == "" || c.TimeZone == "SYSTEM" {
		return nil
	}
	loc, err := time.LoadLocation(c.TimeZone)
	if err != nil || !c.SameAs(loc) {
		return nil
	}
	return loc
}

// SameAs reports whether loc has the clock's offset from UTC now and at
// every probe: a DATETIME the server's sessions write is then read back as
// the same instant in loc, DST included.
func (c Clock) SameAs(loc *time.Location) bool {
	for i, d := range probeDays {
		if _, off := c.ReadAt.AddDate(0, 0, d).In(loc).Zone(); time.Duration(off)*time.Second != c.Offsets[i] {
			return false
		}
	}
	return true
}

// IANAZone names a zone of Go's zone database that tells the clock's time
// all year, for a setting that takes only such names (route.time_zone):
// the named time_zone, UTC, or Etc/GMT-9 for a steady +09:00 ("" when
// none is known, as for a SYSTEM zone with DST or an offset of 5h30).
func (c Clock) IANAZone() string {
	if c.TimeZone != "" && c.TimeZone != "SYSTEM" && c.TimeZone != "Local" {
		if loc, err := time.LoadLocation(c.TimeZone); err == nil && c.SameAs(loc) {
			return c.TimeZone
		}
	}
	if !c.Steady() || c.Offset()%time.Hour != 0 {
		return ""
	}
	h := int(c.Offset() / time.Hour)
	switch {
	case h == 0:
		return "UTC"
	case h > 0:
		return fmt.Sprintf("Etc/GMT-%d", h) // the POSIX sign: Etc/GMT-9 is 9 hours ahead
	}
	return fmt.Sprintf("Etc/GMT+%d", -h)
}

// FormatOffset renders an offset as a session time_zone value ("+09:00",
// "-05:30"), or "" when it is not a whole number of minutes.
func FormatOffset(d time.Duration) string {
	if d%time.Minute != 0 {
		return ""
	}
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%02d:%02d", sign, int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// PrecheckZone is the time_zone a pre-check session on a server with
// clock other takes so that its NOW() is the primary's wall clock at t: ""
// when other already tells the primary's time. exact is false when the
// primary's offset is only known as read (a SYSTEM zone with DST), so it
// can be stale after a change until the primary is read again.
func PrecheckZone(primary, other Clock, t time.Time) (zone string, exact bool) {
	if primary.SameZone(other) {
		return "", true
	}
	loc := primary.Location()
	if loc == nil {
		return FormatOffset(primary.Offset()), false
	}
	_, off := t.In(loc).Zone()
	return FormatOffset(time.Duration(off) * time.Second), true
}

// errNoZone: the primary's offset is no session time_zone value.
var errNoZone = errors.New("the primary's offset from UTC is not a whole number of minutes")

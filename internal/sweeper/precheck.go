package sweeper

// The pre-checks on the replica, judged by the primary's clock (clock.go).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
)

const (
	// clockRefresh is how often a primary zone known only by the offset
	// read (a SYSTEM zone with DST) is read again, and how long pre-checks
	// are corrected before they compare the zones again.
	clockRefresh = time.Hour
	// clockRetry spaces reads of the primary's zone after one failed.
	clockRetry = 30 * time.Second
	// clockRecheck: a pre-check whose offset disagrees with a primary zone
	// known only as read reads the primary again (both may just have
	// changed to summer time), at most this often.
	clockRecheck = time.Minute
)

// erUnknownTimeZone: the server refuses a time_zone value (MariaDB takes
// offsets from -12:59 to +13:00 only; MySQL 8.0.19+ up to +14:00).
const erUnknownTimeZone = 1298

// zones is what the sweeper knows of the primary's clock.
type zones struct {
	primary Clock
	known   bool
	loc     *time.Location // primary.Location(); nil: only the offset read is known
	// lastRead and nextRead: reads of the primary's zone (once it is
	// known, nextRead zero: none is needed again).
	lastRead, nextRead time.Time
	readFailed         bool
	// correctUntil: pre-checks run in the primary's zone until then (a
	// pre-check found the replica in another one).
	correctUntil time.Time
	logged       string // the last difference logged
	refused      string // a time_zone value the replica refused
}

// primaryOffset is the primary's offset from UTC at t, when known.
func (z *zones) primaryOffset(t time.Time) (time.Duration, bool) {
	if !z.known {
		return 0, false
	}
	if z.loc == nil {
		return z.primary.Offset(), true
	}
	_, off := t.In(z.loc).Zone()
	return time.Duration(off) * time.Second, true
}

// readDue reports whether the primary's zone is to be read at now: first,
// after a failed read, and every clockRefresh when only its offset is
// known.
func (z *zones) readDue(now time.Time) bool {
	if !z.known {
		return !now.Before(z.nextRead)
	}
	return !z.nextRead.IsZero() && !now.Before(z.nextRead)
}

// set records a clock read at now.
func (z *zones) set(c Clock, now time.Time) {
	z.primary, z.known, z.loc, z.lastRead, z.readFailed = c, true, c.Location(), now, false
	z.nextRead = time.Time{}
	if z.loc == nil {
		z.nextRead = now.Add(clockRefresh)
	}
}

// readPrimaryClock reads the primary's zone (one SELECT without a table)
// when it is due, or at once with force.
func (s *Sweeper) readPrimaryClock(ctx context.Context, now time.Time, force bool) {
	z := &s.zones
	if !force && !z.readDue(now) {
		return
	}
	c, err := ReadClock(ctx, s.primary)
	if err != nil {
		z.lastRead, z.nextRead = now, now.Add(clockRetry)
		if ctx.Err() == nil && !z.readFailed {
			s.log.Warn("cannot read the primary's time zone; pre-checks use the replica's clock until it is read", zap.Error(err))
		}
		z.readFailed = true
		return
	}
	z.set(c, now)
}

// precheck runs q, a pre-check (a SELECT list of EXISTS), on the replica
// into dest, so that its NOW() is the primary's wall clock: the session's
// offset from UTC comes back with the answer, and when it is not the
// primary's the question is asked again in a session set to the primary's
// offset. While the replica is known to be in another zone, the session is
// set first.
func (s *Sweeper) precheck(ctx context.Context, q string, args []any, dest ...any) error {
	now := time.Now()
	s.readPrimaryClock(ctx, now, false)
	z := &s.zones
	conn, err := s.replica.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if now.Before(z.correctUntil) {
		set, err := s.setPrimaryZone(ctx, conn, now)
		if err != nil {
			return err
		}
		if set {
			defer discard(conn)
			return conn.QueryRowContext(ctx, q, args...).Scan(dest...)
		}
	}
	var secs int64
	if err := conn.QueryRowContext(ctx, q+", "+offsetSQL, args...).Scan(append(dest, &secs)...); err != nil {
		return err
	}
	got := time.Duration(secs) * time.Second
	want, ok := z.primaryOffset(now)
	if !ok || got == want {
		return nil
	}
	if z.loc == nil && now.Sub(z.lastRead) >= clockRecheck {
		s.readPrimaryClock(ctx, now, true)
		if want, ok = z.primaryOffset(now); !ok || got == want {
			return nil
		}
	}
	z.correctUntil = now.Add(clockRefresh)
	s.logDifference(got, want)
	set, err := s.setPrimaryZone(ctx, conn, now)
	if err != nil || !set {
		return err // !set: the replica's answer, as before (logged)
	}
	defer discard(conn)
	return conn.QueryRowContext(ctx, q, args...).Scan(dest...)
}

// setPrimaryZone sets conn's time_zone to the primary's offset at now. It
// returns false, logged once, when the offset is no time_zone value the
// replica takes; an error only for a failed connection.
func (s *Sweeper) setPrimaryZone(ctx context.Context, conn *sql.Conn, now time.Time) (bool, error) {
	z := &s.zones
	off, _ := z.primaryOffset(now)
	zone := FormatOffset(off)
	if zone == "" {
		if z.refused != off.String() {
			z.refused = off.String()
			s.log.Warn("pre-checks cannot take the primary's time zone; they use the replica's clock, so due rows may be swept late or early",
				zap.Stringer("primary_zone", z.primary), zap.Error(errNoZone))
		}
		return false, nil
	}
	if zone == z.refused {
		return false, nil
	}
	// zone is FormatOffset's, [+-]HH:MM: nothing to escape.
	_, err := conn.ExecContext(ctx, "SET time_zone = '"+zone+"'")
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erUnknownTimeZone {
		z.refused = zone
		s.log.Warn("the replica refuses the primary's offset as a session time_zone; pre-checks use the replica's clock, so due rows may be swept late or early: run both servers in one time_zone",
			zap.String("time_zone", zone), zap.Stringer("primary_zone", z.primary), zap.Error(err))
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("setting the pre-check session to the primary's time zone: %w", err)
	}
	return true, nil
}

// logDifference logs, once for each pair of offsets, that the replica's
// clock is not the primary's and what the pre-checks do about it.
func (s *Sweeper) logDifference(replica, primary time.Duration) {
	z := &s.zones
	key := FormatOffset(replica) + "/" + FormatOffset(primary)
	if key == z.logged {
		return
	}
	z.logged = key
	fields := []zap.Field{zap.String("replica_offset", FormatOffset(replica)), zap.Stringer("primary_zone", z.primary)}
	if z.loc == nil {
		s.log.Warn("the replica's clock is not in the primary's time zone: pre-checks run in the primary's offset, read again every hour (its SYSTEM zone changes offset during the year, so around a change rows can be swept up to an hour late or early)", fields...)
		return
	}
	s.log.Info("the replica's clock is not in the primary's time zone: pre-checks run in the primary's, so rows are due by the primary's clock", fields...)
}

// discard closes conn instead of handing it back to the pool, so its
// session time_zone reaches no other user: database/sql drops a connection
// whose Raw returns driver.ErrBadConn.
func discard(conn *sql.Conn) { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }

// Package serverclock turns local times into a database server's own: a
// created_at filled by the server (DEFAULT CURRENT_TIMESTAMP, NOW(3)) holds
// the server's wall clock in its own zone, so a bound on it is computed from
// the server's clock, read once, whatever the zone of this machine or the
// server. reconcile and replay bound their ranges with it.
package serverclock

import (
	"context"
	"database/sql"
	"time"
)

// Clock is a server's clock when it was read.
type Clock struct {
	Wall time.Time // NOW(6): the server's wall clock, which the driver labels UTC
	Unix float64   // UNIX_TIMESTAMP(NOW(6))
	At   time.Time // the local time it was read
}

// Read reads db's clock.
func Read(ctx context.Context, db *sql.DB) (Clock, error) {
	c := Clock{At: time.Now()}
	err := db.QueryRowContext(ctx, "SELECT NOW(6), UNIX_TIMESTAMP(NOW(6))").Scan(&c.Wall, &c.Unix)
	return c, err
}

// DateTime is local time t as a DATETIME literal of the server's clock.
func (c Clock) DateTime(t time.Time) string {
	return c.Wall.Add(t.Sub(c.At)).Format("2006-01-02 15:04:05.999999")
}

// Value is local time t in a column of the given storage: "" for DATETIME
// and TIMESTAMP (a literal of the server's clock), "s" or "ms" for an
// integer count since the epoch.
func (c Clock) Value(t time.Time, epoch string) any {
	unix := c.Unix + t.Sub(c.At).Seconds()
	switch epoch {
	case "s":
		return int64(unix)
	case "ms":
		return int64(unix * 1000)
	}
	return c.DateTime(t)
}

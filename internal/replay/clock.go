package replay

import (
	"context"
	"database/sql"
	"time"
)

// clock is the replica's clock when the replay starts. created_at was
// filled by the server (DEFAULT CURRENT_TIMESTAMP, NOW(3)) in its own time
// zone, so --since and --until are turned into the server's wall clock the
// way reconcile does, whatever the zone of this machine or the server.
type clock struct {
	wall time.Time // NOW(6): the server's wall clock, which the driver labels UTC
	unix float64   // UNIX_TIMESTAMP(NOW(6))
	at   time.Time // the local time it was read
}

func readClock(ctx context.Context, db *sql.DB) (clock, error) {
	c := clock{at: time.Now()}
	err := db.QueryRowContext(ctx, "SELECT NOW(6), UNIX_TIMESTAMP(NOW(6))").Scan(&c.wall, &c.unix)
	return c, err
}

// value is local time t in a created_at column of the given storage: ""
// for DATETIME and TIMESTAMP (a literal of the server's clock), "s" or "ms"
// for an integer count since the epoch.
func (c clock) value(t time.Time, epoch string) any {
	unix := c.unix + t.Sub(c.at).Seconds()
	switch epoch {
	case "s":
		return int64(unix)
	case "ms":
		return int64(unix * 1000)
	}
	return c.wall.Add(t.Sub(c.at)).Format("2006-01-02 15:04:05.999999")
}

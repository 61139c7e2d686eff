package preflight

import (
	"context"
	"errors"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// checkMarkImage says which row image the SENT marks will be logged with
// (relay.mark_row_image, internal/rowstatus): minimal needs the primary
// user to set binlog_row_image for its own session, which MySQL grants with
// SESSION_VARIABLES_ADMIN (or SYSTEM_VARIABLES_ADMIN, or SUPER) and MariaDB
// with BINLOG ADMIN (or SUPER before 11.0). Without it the marks are logged
// full, as before: a warning, not an error.
func (c *checker) checkMarkImage(ctx context.Context, where string) {
	if c.s.Config.Relay.MarkRowImage != "minimal" {
		c.add(Info, where, "SENT marks are logged with the server's row image (relay.mark_row_image: full): under binlog_row_image=FULL each marked row is logged twice with its payload")
		return
	}
	conn, err := c.s.Primary.Conn(ctx)
	if err != nil {
		return // checkPrimary reported the connection
	}
	defer conn.Close()
	var version string
	_ = conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version)
	_, err = conn.ExecContext(ctx, "SET SESSION binlog_row_image = 'MINIMAL'")
	// The probe's session goes back to the pool: undo it.
	defer conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION binlog_row_image = DEFAULT") //nolint:errcheck
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1227: // ER_SPECIFIC_ACCESS_DENIED_ERROR
		grant := "GRANT SESSION_VARIABLES_ADMIN ON *.* TO the primary user (MySQL 8.0+)"
		if strings.Contains(version, "MariaDB") {
			grant = "GRANT BINLOG ADMIN ON *.* TO the primary user (MariaDB 10.5.2+; it also allows PURGE BINARY LOGS)"
		}
		c.add(Warning, where, "SENT marks will be logged with full row images (each marked row twice, payload included): the primary user may not set binlog_row_image for its session (%s); %s, or set relay.mark_row_image: full", me.Message, grant)
	case err != nil:
		c.add(Warning, where, "setting binlog_row_image=MINIMAL for the marks' session: %v; SENT marks will be logged with full row images", err)
	default:
		c.add(Info, where, "SENT marks are logged with minimal row images (the id and the changed columns; relay.mark_row_image: minimal)")
	}
}

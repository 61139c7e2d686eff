package source

// How the relay signs in to the source and the primary: the section's
// password, or with aws_iam an RDS IAM token signed afresh for each new
// connection (internal/rdsauth). A token lives 15 minutes but is checked
// only at sign-in, so a pool's long-lived connections outlive it; each new
// connection, and each reconnect of the binlog stream, asks for a new one.
// Tokens are never logged, kept or put in an error.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/rdsauth"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// newTokens makes the signer of one section's tokens; tests put a fake
// here.
var newTokens = func(ctx context.Context, region, user string) (binlog.PasswordFunc, error) {
	t, err := rdsauth.New(ctx, region, user)
	if err != nil {
		return nil, err
	}
	return t.Password, nil
}

// passwordFunc is nil for a section that signs in with its password, and
// the token signer of one with aws_iam.
func passwordFunc(ctx context.Context, m config.MySQL, field string) (binlog.PasswordFunc, error) {
	if m.AWSIAM == nil {
		return nil, nil
	}
	pw, err := newTokens(ctx, m.AWSIAM.Region, m.User)
	if err != nil {
		return nil, fmt.Errorf("%s.aws_iam: %w", field, err)
	}
	return pw, nil
}

// Connector dials one server section (field names it in errors): its
// driver configuration, and with aws_iam a fresh token as the password of each connection.
func Connector(m config.MySQL, field string) (driver.Connector, error) {
	mc, err := m.DriverConfig(field)
	if err != nil {
		return nil, err
	}
	pw, err := passwordFunc(context.Background(), m, field)
	if err != nil {
		return nil, err
	}
	if pw != nil {
		// RDS's AWSAuthenticationPlugin asks for the token with
		// mysql_clear_password, which the driver sends only when allowed;
		// config refuses aws_iam without TLS, which protects it.
		mc.AllowCleartextPasswords = true
		// The driver runs this on a copy of mc for every new connection.
		if err := mc.Apply(mysql.BeforeConnect(func(ctx context.Context, c *mysql.Config) error {
			token, err := pw(ctx, c.Addr)
			if err != nil {
				return err
			}
			c.Passwd = token
			return nil
		})); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
	}
	c, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return c, nil
}

// OpenDB is the database/sql pool of one server section (Connector); it
// dials nothing yet.
func OpenDB(m config.MySQL, field string) (*sql.DB, error) {
	c, err := Connector(m, field)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// BinlogPassword is what the binlog reader signs in with: the source's
// password, or its token signer (binlog.Config.PasswordFunc).
func BinlogPassword(ctx context.Context, m config.MySQL) (string, binlog.PasswordFunc, error) {
	pw, err := passwordFunc(ctx, m, "source")
	if err != nil || pw != nil {
		return "", pw, err
	}
	return m.Password, nil, nil
}

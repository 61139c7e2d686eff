package config

// Managed MySQL (RDS, Aurora): IAM authentication instead of a password,
// and the binlog retention `check` holds the source to
// (docs/operating.md, "Managed MySQL").

import (
	"errors"
	"fmt"
	"time"
)

// AWSIAM signs in with an RDS IAM authentication token instead of a
// password: the AWS SDK's default credentials (environment, shared files,
// web identity, ECS or EC2 role) sign a token for the user and the host,
// afresh for each new connection (a token lives 15 minutes).
type AWSIAM struct {
	// Region is the database's AWS region, e.g. eu-west-1.
	Region string `yaml:"region"`
}

// DefaultMinBinlogRetention is source.min_binlog_retention when unset.
const DefaultMinBinlogRetention = 24 * time.Hour

// BinlogRetentionFloor is the retention below which `check` warns about the
// source's binlog: source.min_binlog_retention, 24h when unset; 0 means no
// check.
func (m MySQL) BinlogRetentionFloor() time.Duration {
	if m.MinBinlogRetention == nil {
		return DefaultMinBinlogRetention
	}
	return *m.MinBinlogRetention
}

// validateManaged checks the aws_iam and min_binlog_retention keys of one
// server section; source says whether it is `source:`.
func validateManaged(field string, m MySQL, source bool) []error {
	var errs []error
	if m.MinBinlogRetention != nil {
		switch {
		case !source:
			errs = append(errs, fmt.Errorf("%s.min_binlog_retention: only the source's binlog is read; set source.min_binlog_retention", field))
		case *m.MinBinlogRetention < 0:
			errs = append(errs, fmt.Errorf("%s.min_binlog_retention: must be positive (0 turns the check off)", field))
		}
	}
	if m.AWSIAM == nil {
		return errs
	}
	if m.AWSIAM.Region == "" {
		errs = append(errs, fmt.Errorf("%s.aws_iam.region: required (the database's AWS region, e.g. eu-west-1)", field))
	}
	if !m.TLS.Enabled {
		// The token goes to the server as a clear-text password
		// (mysql_clear_password), and RDS takes IAM sign-ins only over TLS.
		errs = append(errs, fmt.Errorf("%s.aws_iam: IAM authentication needs TLS (the token is sent as a clear-text password): set %s.tls.enabled: true, with ca_file: the RDS CA bundle", field, field))
	}
	if m.Password != "" || m.PasswordFile != "" {
		errs = append(errs, fmt.Errorf("%s.aws_iam: set %s.password (or password_file) or aws_iam, not both", field, field))
	}
	return errs
}

// errIAMElsewhere refuses aws_iam where the relay does not sign in with it.
var errIAMElsewhere = errors.New("aws_iam: only source and primary sign in with IAM; use a password here")

package config

import (
	"strings"
	"testing"
	"time"
)

const managedBase = `
broker: {url: "amqp://relay:x@10.0.0.20:5672/"}
tables:
  - {preset: producer-message, schema: shop}
`

// parseManaged parses a source: section (and a primary: one, or the
// default) with the rest of a valid config.
func parseManaged(t *testing.T, sections string) (*Config, error) {
	t.Helper()
	if !strings.Contains(sections, "primary:") {
		sections += "\nprimary: {host: 10.0.0.11, user: relay}"
	}
	return Parse([]byte(sections+managedBase), func(string) (string, bool) { return "", false })
}

// source.min_binlog_retention: 24h unset, 0s turns the check off, a
// duration otherwise; not for the primary.
func TestMinBinlogRetention(t *testing.T) {
	for src, want := range map[string]time.Duration{
		`source: {host: h, user: u}`:                             24 * time.Hour,
		`source: {host: h, user: u, min_binlog_retention: 72h}`:  72 * time.Hour,
		`source: {host: h, user: u, min_binlog_retention: 90m}`:  90 * time.Minute,
		`source: {host: h, user: u, min_binlog_retention: "0s"}`: 0,
		`source: {host: h, user: u, min_binlog_retention: 0s}`:   0,
	} {
		c, err := parseManaged(t, src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got := c.Source.BinlogRetentionFloor(); got != want {
			t.Errorf("%s: floor %v, want %v", src, got, want)
		}
	}
	for src, want := range map[string]string{
		`source: {host: h, user: u, min_binlog_retention: -1h}`:                               "source.min_binlog_retention: must be positive",
		"source: {host: h, user: u}\nprimary: {host: p, user: u, min_binlog_retention: 1h}\n": "primary.min_binlog_retention: only the source's binlog is read",
		// YAML's bare 0 is a number: the config takes durations with a unit.
		`source: {host: h, user: u, min_binlog_retention: 0}`:                                                                                   "source.min_binlog_retention: expected a duration",
		`source: {host: h, user: u, min_binlog_retention: a day}`:                                                                               "source.min_binlog_retention",
		"source: {host: h, user: u}\nreconcile: {consumers: [{name: c, schema: s, mysql: {host: r, user: u, aws_iam: {region: eu-west-1}}}]}\n": "reconcile.consumers[0].mysql.aws_iam: only source and primary",
	} {
		_, err := parseManaged(t, src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", src, err, want)
		}
	}
}

// aws_iam needs a region and TLS, and replaces the password.
func TestAWSIAMConfig(t *testing.T) {
	c, err := parseManaged(t, `source: {host: db.rds.test, user: relay, aws_iam: {region: eu-west-1}, tls: {enabled: true}}`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.AWSIAM == nil || c.Source.AWSIAM.Region != "eu-west-1" || c.Primary.AWSIAM != nil {
		t.Fatalf("aws_iam: %+v / %+v", c.Source.AWSIAM, c.Primary.AWSIAM)
	}
	for src, want := range map[string]string{
		`source: {host: h, user: u, aws_iam: {region: eu-west-1}}`:                                         "source.aws_iam: IAM authentication needs TLS",
		`source: {host: h, user: u, aws_iam: {}, tls: {enabled: true}}`:                                    "source.aws_iam.region: required",
		`source: {host: h, user: u, password: s3cret, aws_iam: {region: eu-west-1}, tls: {enabled: true}}`: "source.aws_iam: set source.password (or password_file) or aws_iam, not both",
		`source: {host: h, user: u, aws_iam: {region: eu-west-1, role: x}, tls: {enabled: true}}`:          "source.aws_iam.role: unknown key",
		"source: {host: h, user: u}\nprimary: {host: p, user: u, aws_iam: {region: eu-west-1}}\n":          "primary.aws_iam: IAM authentication needs TLS",
	} {
		_, err := parseManaged(t, src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", src, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

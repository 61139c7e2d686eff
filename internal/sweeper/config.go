package sweeper

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ident"
)

// Config tunes the sweeper: the `sweeper:` section of the relay's YAML
// (internal/app converts it). New fills the zero fields with Defaults and
// refuses what Validate refuses; errors name the field by its YAML key.
type Config struct {
	// Interval is how often the sweeper asks the replica whether anything is
	// due (one cheap indexed query per table). The primary is touched only
	// when the answer is yes.
	Interval time.Duration
	// GracePeriod: a row is the sweeper's only once it is older than this, so
	// it never races a healthy binlog path for a fresh row.
	GracePeriod time.Duration
	// BatchSize is the most rows one claim takes.
	BatchSize int
	// ZombieTimeout: a row SENDING for longer (its claimer died mid-publish)
	// goes back to PENDING.
	ZombieTimeout time.Duration
	Archive       Archive
}

// Archive modes.
const (
	ArchiveOff    = "off"
	ArchiveDelete = "delete"
	ArchiveMove   = "move"
)

// Archive moves or deletes old SENT rows. FAILED rows are never touched.
type Archive struct {
	// Mode is off (the default), delete or move.
	Mode string
	// Retention: SENT rows whose updated_at (created_at when the table has
	// none) is older than this are archived.
	Retention time.Duration
	// BatchSize rows per statement, and Pause between statements, so the
	// primary never holds a long lock for the archive.
	BatchSize int
	Pause     time.Duration
	// Interval is how often the replica is asked whether anything is old
	// enough.
	Interval time.Duration
	// Table names the archive table for move: "{table}" stands for the outbox
	// table's name; it lives in the outbox table's schema.
	Table string
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	c.Interval = cmp.Or(c.Interval, 5*time.Second)
	c.GracePeriod = cmp.Or(c.GracePeriod, 60*time.Second)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.ZombieTimeout = cmp.Or(c.ZombieTimeout, 5*time.Minute)
	a := &c.Archive
	a.Mode = cmp.Or(a.Mode, ArchiveOff)
	a.Retention = cmp.Or(a.Retention, 7*24*time.Hour)
	a.BatchSize = cmp.Or(a.BatchSize, 1000)
	a.Pause = cmp.Or(a.Pause, 100*time.Millisecond)
	a.Interval = cmp.Or(a.Interval, time.Minute)
	a.Table = cmp.Or(a.Table, "{table}_archive")
}

// Validate reports every bad field at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("sweeper."+field+": "+format, args...))
	}
	if c.Interval <= 0 {
		bad("interval", "must be positive")
	}
	if c.GracePeriod < 0 {
		bad("grace_period", "must not be negative")
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		bad("batch_size", "%d is not between 1 and 10000", c.BatchSize)
	}
	if c.ZombieTimeout <= 0 {
		bad("zombie_timeout", "must be positive")
	}
	a := c.Archive
	switch a.Mode {
	case ArchiveOff, ArchiveDelete, ArchiveMove:
	default:
		bad("archive.mode", "%q is not off, delete or move", a.Mode)
	}
	if a.Mode != ArchiveOff {
		if a.Retention <= 0 {
			bad("archive.retention", "must be positive")
		}
		if a.BatchSize < 1 || a.BatchSize > 100000 {
			bad("archive.batch_size", "%d is not between 1 and 100000", a.BatchSize)
		}
		if a.Pause < 0 {
			bad("archive.pause", "must not be negative")
		}
		if a.Interval <= 0 {
			bad("archive.interval", "must be positive")
		}
	}
	if a.Mode == ArchiveMove {
		if err := ident.Check("sweeper.archive.table", ArchiveTableName(a.Table, "t")); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ArchiveTableName fills "{table}" in the archive table template.
func ArchiveTableName(tmpl, table string) string { return strings.ReplaceAll(tmpl, "{table}", table) }

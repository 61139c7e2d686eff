package config

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/glob"
	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Reconcile is the `reconcile:` section: the consumer inboxes to compare
// the outbox tables with, and how (docs/reconcile.md).
type Reconcile struct {
	// Interval runs a reconciliation inside `run` this often, on the leader
	// only. 0 (the default) is off; `binlog-relay reconcile` runs one
	// whatever this says.
	Interval time.Duration `yaml:"interval"`
	// Window is how far back a run looks: outbox rows created, and inbox
	// rows recorded, within it. Default 24h (`reconcile --since`'s default).
	Window time.Duration `yaml:"window"`
	// GracePeriod: a SENT row without an inbox row counts as missing only
	// once it was sent (its updated_at, else created_at) longer ago than
	// this, so messages on their way are not reported. Default 5m.
	GracePeriod time.Duration `yaml:"grace_period"`
	// PendingAfter: a row still pending or sending this long after it was
	// created is reported. Default 15m.
	PendingAfter time.Duration `yaml:"pending_after"`
	// ChunkSize is the most rows one statement reads. Default 5000.
	ChunkSize int `yaml:"chunk_size"`
	// MaxIDs is how many ids each finding lists; its count is always whole.
	// Default 100.
	MaxIDs int `yaml:"max_ids"`
	// Repair makes the periodic run also reset the rows no consumer
	// processed to pending (`reconcile --repair`). Default false.
	Repair bool `yaml:"repair"`
	// Key is the Redis key holding the last result (for `status`). Default
	// binlog-relay:<name>:reconcile.
	Key       string              `yaml:"key"`
	Consumers []ReconcileConsumer `yaml:"consumers"`
}

// ReconcileConsumer is one consumer's inbox, read from a replica of its
// database.
type ReconcileConsumer struct {
	// Name names the consumer in reports and metric labels.
	Name string `yaml:"name"`
	// MySQL is the server holding the inbox table: a replica (reconcile
	// reads only). Either this or DSN.
	MySQL MySQL `yaml:"mysql"`
	// DSN is the server as a go-sql-driver DSN instead,
	// user:password@tcp(host:3306)/database; it is never logged.
	DSN string `yaml:"dsn"`
	// Schema is the inbox table's database (default: the DSN's database).
	Schema string `yaml:"schema"`
	// Preset is the inbox table's layout, as pkg/inbox names it: inbox
	// (the default), consumer-message or msg-dedup.
	Preset     string           `yaml:"preset"`
	Table      string           `yaml:"table"`
	Columns    inbox.Columns    `yaml:"columns"`
	LogTable   string           `yaml:"log_table"`
	LogColumns inbox.LogColumns `yaml:"log_columns"`
	// Consumer is the value of the consumer column (preset inbox: the
	// inbox's ConsumerName). Default: Name.
	Consumer string `yaml:"consumer"`
	// Tables lists the outbox tables (schema.name) whose messages this
	// consumer gets. Default: all.
	Tables []string `yaml:"tables"`
	// Exchanges and RoutingKeys narrow the messages it should get: the
	// exchange is one of Exchanges, and the routing key matches one of
	// RoutingKeys, binding patterns as a topic exchange reads them (* one
	// word, # zero or more). Empty: any.
	Exchanges   []string `yaml:"exchanges"`
	RoutingKeys []string `yaml:"routing_keys"`
}

// consumerNameRe keeps consumer names usable as metric label values and in
// one-line reports.
var consumerNameRe = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// defaults fills unset fields; key is the default reconcile.key.
func (r *Reconcile) defaults(key string) {
	r.Window = cmp.Or(r.Window, 24*time.Hour)
	r.GracePeriod = cmp.Or(r.GracePeriod, 5*time.Minute)
	r.PendingAfter = cmp.Or(r.PendingAfter, 15*time.Minute)
	r.ChunkSize = cmp.Or(r.ChunkSize, 5000)
	r.MaxIDs = cmp.Or(r.MaxIDs, 100)
	r.Key = cmp.Or(r.Key, key)
	for i := range r.Consumers {
		c := &r.Consumers[i]
		if c.MySQL.Host != "" {
			c.MySQL.Port = cmp.Or(c.MySQL.Port, 3306)
		}
		if c.Schema == "" && c.DSN != "" {
			if d, err := mysql.ParseDSN(c.DSN); err == nil {
				c.Schema = d.DBName
			}
		}
		c.Consumer = cmp.Or(c.Consumer, c.Name)
	}
}

// InboxLayout is the consumer's inbox table layout (pkg/inbox's preset
// with the consumer's overrides).
func (c ReconcileConsumer) InboxLayout() (inbox.Preset, error) {
	return inbox.Config{Preset: c.Preset, Table: c.Table, Columns: c.Columns, LogTable: c.LogTable,
		LogColumns: c.LogColumns}.Layout()
}

// ConsumerDriverConfig is the go-sql-driver configuration of the
// consumer's server: its mysql section's (MySQL.DriverConfig), or its DSN
// with the options every connection of the relay uses.
func (c ReconcileConsumer) ConsumerDriverConfig(field string) (*mysql.Config, error) {
	if c.DSN == "" {
		return c.MySQL.DriverConfig(field + ".mysql")
	}
	d, err := mysql.ParseDSN(c.DSN)
	if err != nil {
		// The DSN holds a password: never echoed.
		return nil, fmt.Errorf("%s.dsn: not a DSN of the form user:password@tcp(host:3306)/database", field)
	}
	relayOptions(d)
	return d, nil
}

// Redacted describes the consumer's server without its password.
func (c ReconcileConsumer) Redacted() string {
	if c.DSN == "" {
		return c.MySQL.Redacted()
	}
	if d, err := mysql.ParseDSN(c.DSN); err == nil {
		return d.User + "@" + d.Addr
	}
	return "(dsn)"
}

// Validate reports every bad field of the section; tables are the
// configured outbox tables the consumers may name.
func (r *Reconcile) Validate(tables []*outbox.Table) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("reconcile."+field+": "+format, args...))
	}
	if r.Interval < 0 {
		bad("interval", "must not be negative (0 is off)")
	}
	if r.Window <= 0 {
		bad("window", "must be positive")
	}
	if r.GracePeriod < 0 {
		bad("grace_period", "must not be negative")
	}
	if r.PendingAfter <= 0 {
		bad("pending_after", "must be positive")
	}
	if r.ChunkSize < 100 || r.ChunkSize > 100000 {
		bad("chunk_size", "%d is not between 100 and 100000", r.ChunkSize)
	}
	if r.MaxIDs < 0 || r.MaxIDs > 100000 {
		bad("max_ids", "%d is not between 0 and 100000", r.MaxIDs)
	}
	seen := map[string]int{}
	for i, c := range r.Consumers {
		field := fmt.Sprintf("reconcile.consumers[%d]", i)
		if j, dup := seen[c.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name: the same as reconcile.consumers[%d].name", field, j))
		}
		seen[c.Name] = i
		errs = append(errs, c.validate(field, tables)...)
	}
	return errors.Join(errs...)
}

func (c ReconcileConsumer) validate(field string, tables []*outbox.Table) []error {
	var errs []error
	bad := func(sub, format string, args ...any) {
		errs = append(errs, fmt.Errorf(field+"."+sub+": "+format, args...))
	}
	if !consumerNameRe.MatchString(c.Name) {
		bad("name", "required, at most 64 of A-Z a-z 0-9 _ . : -")
	}
	switch {
	case c.DSN == "" && c.MySQL.Host == "":
		bad("mysql.host", "required (or dsn): a replica holding the consumer's inbox table")
	case c.DSN != "" && c.MySQL.Host != "":
		bad("dsn", "set mysql or dsn, not both")
	case c.DSN != "":
		if _, err := c.ConsumerDriverConfig(field); err != nil {
			errs = append(errs, err)
		}
	case c.MySQL.User == "":
		bad("mysql.user", "required")
	}
	if len(c.MySQL.Hosts) > 0 {
		bad("mysql.hosts", "only the source takes a list of servers")
	}
	if c.MySQL.AWSIAM != nil {
		errs = append(errs, fmt.Errorf("%s.mysql.%w", field, errIAMElsewhere)) // managed.go
	}
	if c.MySQL.MinBinlogRetention != nil {
		bad("mysql.min_binlog_retention", "only the source's binlog is read; set source.min_binlog_retention")
	}
	if c.Schema == "" {
		bad("schema", "required: the database holding the inbox table")
	} else if err := ident.Check(field+".schema", c.Schema); err != nil {
		errs = append(errs, err)
	}
	if c.Preset != "" && !looksLikeName(c.Preset) && !slices.Contains(inbox.PresetNames(), c.Preset) {
		// Refused here: inbox's error quotes the name, shown only when it reads as one.
		bad("preset", "unknown preset (known: %s)", strings.Join(inbox.PresetNames(), ", "))
	} else if _, err := c.InboxLayout(); err != nil {
		// pkg/inbox names its Go fields (inbox config: Columns.Status).
		errs = append(errs, fmt.Errorf("%s: %w", field, err))
	}
	if len(c.Consumer) > 128 {
		bad("consumer", "longer than 128 bytes")
	}
	for i, name := range c.Tables {
		if _, err := FindTable(tables, name); err != nil {
			// Not FindTable's error: it quotes the name.
			bad(fmt.Sprintf("tables[%d]", i), "not one configured outbox table, by schema.name or a name only one has (%s)", tableNames(tables))
		}
	}
	for i, ex := range c.Exchanges {
		if ex == "" || len(ex) > 255 {
			bad(fmt.Sprintf("exchanges[%d]", i), "not an exchange name (1 to 255 bytes)")
		}
	}
	for i, rk := range c.RoutingKeys {
		if len(rk) > 255 {
			bad(fmt.Sprintf("routing_keys[%d]", i), "%d bytes, AMQP routing keys are at most 255", len(rk))
		}
	}
	return errs
}

// FindTable finds a configured outbox table by schema.name, or by name
// alone when one table has it (MatchTables).
func FindTable(tables []*outbox.Table, name string) (*outbox.Table, error) {
	found := MatchTables(tables, name)
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, fmt.Errorf("%q is not a configured outbox table (%s)", name, tableNames(tables))
	default:
		return nil, fmt.Errorf("%q is ambiguous: use schema.name", name)
	}
}

// MatchTables are the configured tables a name given on the command line
// means: schema.name, or name alone, as written; failing that, the same
// without case. Two tables whose names differ only by case (two tables
// under lower_case_table_names=0) are each found by their own spelling.
func MatchTables(tables []*outbox.Table, name string) []*outbox.Table {
	match := func(eq func(a, b string) bool) []*outbox.Table {
		var found []*outbox.Table
		for _, t := range tables {
			if eq(t.FullName(), name) || (!strings.Contains(name, ".") && eq(t.Name, name)) {
				found = append(found, t)
			}
		}
		return found
	}
	if found := match(func(a, b string) bool { return a == b }); len(found) > 0 {
		return found
	}
	if found := match(strings.EqualFold); len(found) > 0 {
		return found
	}
	return matchPatterns(tables, name)
}

// matchPatterns is the table schema.name as the pattern entries that
// match it would read it (a tenant the relay has not listed yet, or a
// config not resolved against a server): one table per matching entry.
func matchPatterns(tables []*outbox.Table, name string) []*outbox.Table {
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		return nil
	}
	var found []*outbox.Table
	for _, t := range tables {
		if !t.IsPattern() {
			continue
		}
		s, err1 := glob.Compile(t.Schema, false)
		n, err2 := glob.Compile(t.Name, false)
		if err1 == nil && err2 == nil && s.Match(schema) && n.Match(table) {
			found = append(found, t.Matched(schema, table))
		}
	}
	return found
}

// tableNames lists the tables as schema.name.
func tableNames(tables []*outbox.Table) string {
	var names []string
	for _, t := range tables {
		names = append(names, t.FullName())
	}
	return strings.Join(names, ", ")
}

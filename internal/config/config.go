// Package config owns the relay's YAML file: its types, ${ENV} expansion in
// values, unknown keys refused, presets applied and overridden field by
// field, and one defaults-and-validate pass before anything connects.
// Errors name the YAML key and its line, never a value (redact.go).
//
// It is a leaf: it imports none of the stages it configures. A key a stage
// owns keeps its zero value here, meaning "the stage's default"; the stage's
// constructor applies its defaults and validates its Config (errors naming
// the same YAML key), and internal/app converts these types into the
// stages' Configs. Only the outbox table mapping (pkg/outbox) and the
// inbox layouts (pkg/inbox) are decoded straight into their own types: they
// are the vocabulary of the file itself.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"gopkg.in/yaml.v3"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Config is the whole file.
type Config struct {
	// Name identifies this relay (checkpoint key, connection names); relays
	// sharing a name share a checkpoint.
	Name       string          `yaml:"name"`
	Source     MySQL           `yaml:"source"`
	Primary    MySQL           `yaml:"primary"`
	Broker     Broker          `yaml:"broker"`
	Redis      Redis           `yaml:"redis"`
	Checkpoint Checkpoint      `yaml:"checkpoint"`
	Relay      Relay           `yaml:"relay"`
	Retry      Backoff         `yaml:"retry"`
	Tables     []*outbox.Table `yaml:"-"`
	RawTables  []yaml.Node     `yaml:"tables"`
	Log        Log             `yaml:"log"`
	Sweeper    Sweeper         `yaml:"sweeper"`
	HTTP       HTTP            `yaml:"http"`
	Metrics    Metrics         `yaml:"metrics"`
	HA         HA              `yaml:"ha"`
	Reconcile  Reconcile       `yaml:"reconcile"`
}

// MySQL is a server connection.
type MySQL struct {
	Host         string `yaml:"host"`
	Port         int    `yaml:"port"`
	User         string `yaml:"user"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	// ServerID (source only) is the replica id the relay announces; 0 picks
	// a random one.
	ServerID uint32 `yaml:"server_id"`
	// Hosts (source only) lists replicas as host[:port], in order of
	// preference: on a failure that persists the relay moves to the next
	// and resumes by GTID (docs/ha.md). Instead of host/port.
	Hosts []string `yaml:"hosts"`
	// Flavor is mysql, mariadb or auto (detected).
	Flavor string `yaml:"flavor"`
	// XABufferRows and XABufferBytes (source only) bound the outbox rows of
	// prepared XA transactions held until their XA COMMIT; 0 means the
	// reader's defaults (100,000 rows, 64 MiB).
	XABufferRows  int   `yaml:"xa_buffer_rows"`
	XABufferBytes int64 `yaml:"xa_buffer_bytes"`
	TLS           TLS   `yaml:"tls"`
	// AWSIAM (source and primary) signs in with an RDS IAM token made
	// afresh for each connection, instead of a password; it needs TLS
	// (managed.go).
	AWSIAM *AWSIAM `yaml:"aws_iam"`
	// MinBinlogRetention (source only) is the binlog retention below which
	// `check` warns; unset means 24h, 0 turns the check off
	// (BinlogRetentionFloor).
	MinBinlogRetention *time.Duration `yaml:"min_binlog_retention"`
}

// TLS options for any connection.
type TLS struct {
	Enabled    bool   `yaml:"enabled"`
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify is for tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Broker is RabbitMQ.
type Broker struct {
	// URL is one node; URLs the nodes of one cluster, dialled in turn
	// (brokernodes.go). One of them; password_file applies to each.
	URL          string   `yaml:"url"`
	URLs         []string `yaml:"urls"`
	PasswordFile string   `yaml:"password_file"`
	Window       int      `yaml:"window"`
	TLS          TLS      `yaml:"tls"`
	// DeadLetterExchange receives the messages of tables without a status
	// column that the broker refused, with the reason in headers. Empty:
	// such a message holds the stream until the broker takes it.
	DeadLetterExchange string `yaml:"dead_letter_exchange"`
	// MaxMessageBytes is the largest body published; a larger row is FAILED
	// (RabbitMQ closes the channel on a body over its max_message_size).
	// 0 means the broker's default max_message_size by the version it
	// announces: 16 MiB on RabbitMQ 4, 128 MiB on 3.x.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// Stream, when it has a name, has the binlog path publish every row
	// into that RabbitMQ stream over the stream protocol instead of the
	// tables' exchanges, deduplicated by the broker (docs/lifecycle.md).
	Stream Stream `yaml:"stream"`
}

// Stream is `broker.stream:`.
type Stream struct {
	// Name is the stream, declared when missing.
	Name string `yaml:"name"`
	// URI is the broker's stream port,
	// rabbitmq-stream://user:password@host:5552/vhost; empty: each node of
	// broker.url / broker.urls on port 5552 (StreamURIs).
	URI          string `yaml:"uri"`
	PasswordFile string `yaml:"password_file"`
	// MaxLengthBytes and MaxAge are the retention a stream declared by the
	// relay gets (0: the broker's defaults); a stream already there keeps
	// its own.
	MaxLengthBytes int64         `yaml:"max_length_bytes"`
	MaxAge         time.Duration `yaml:"max_age"`
	// ConfirmTimeout is how long a stream lane waits for a message's
	// confirm before it fails (and the binlog path starts again from its
	// checkpoint); 0 means the lane's default, 30s.
	ConfirmTimeout time.Duration `yaml:"confirm_timeout"`
}

// Enabled reports whether the binlog path publishes into a stream.
func (s Stream) Enabled() bool { return s.Name != "" }

// Redis holds the checkpoint, the leader lease, the instance heartbeat and
// the first-saved marker: one Redis, a Sentinel group or a Cluster
// (redis.go, docs/ha.md).
type Redis struct {
	// Addr is one Redis, host:port; exclusive with Addrs.
	Addr string `yaml:"addr"`
	// Addrs are several host:port: the Sentinels with Sentinel, seed nodes
	// with Cluster.
	Addrs        []string `yaml:"addrs"`
	Username     string   `yaml:"username"`
	Password     string   `yaml:"password"`
	PasswordFile string   `yaml:"password_file"`
	DB           int      `yaml:"db"`
	TLS          TLS      `yaml:"tls"`
	// Sentinel, with a master name, makes the addresses Sentinels that
	// name the master the relay writes to; it follows a failover.
	Sentinel Sentinel `yaml:"sentinel"`
	// Cluster makes the addresses nodes of a Redis Cluster; the relay's
	// keys then carry its name as a hash tag (rediskey).
	Cluster bool `yaml:"cluster"`
	// WaitReplicas, above 0, makes the relay WAIT for that many replicas
	// to acknowledge the leader lease (taken or renewed) and each
	// checkpoint save, for WaitTimeout (default 1s).
	WaitReplicas int           `yaml:"wait_replicas"`
	WaitTimeout  time.Duration `yaml:"wait_timeout"`
}

// Checkpoint says where and how often the position is saved.
type Checkpoint struct {
	Key string `yaml:"key"`
	// Interval is how often the position is saved; 0 means the relay's
	// default (1s).
	Interval time.Duration `yaml:"interval"`
	// OutageWindow is how long publishing goes on while the checkpoint
	// cannot be saved (Redis down), the position held in memory; past it
	// the relay holds until Redis answers. Default 30s.
	OutageWindow time.Duration `yaml:"outage_window"`
}

// HA is the leader lease (docs/ha.md).
type HA struct {
	// Enabled: relays with the same name elect one leader through a lease
	// in Redis; the others wait as standbys. Off (the default), the relay
	// streams on its own.
	Enabled bool `yaml:"enabled"`
	// LeaseTTL is how long the lease lives unrenewed: a standby takes over
	// this long after the leader dies. 0 means the lease's default (5s).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
}

// Relay tunes the binlog path.
type Relay struct {
	BatchSize     int           `yaml:"batch_size"`
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MaxUnmarked is the most rows confirmed by the broker and not yet
	// marked SENT (the rows a crash publishes again); 0 means 4096.
	MaxUnmarked int `yaml:"max_unmarked"`
	// MarkSessions is the most outbox tables of one batch whose SENT
	// marks run at once, each on a connection of its own; 0 means 4.
	MarkSessions int `yaml:"mark_sessions"`
	// MarkRowImage is the row image the SENT marks are logged with:
	// minimal (the default; the marking session sets binlog_row_image =
	// MINIMAL where its grants allow, FULL otherwise) or full.
	MarkRowImage string        `yaml:"mark_row_image"`
	Buffer       int           `yaml:"buffer"`
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	Heartbeat    time.Duration `yaml:"heartbeat"`
	// Ordering is relaxed (a failed row goes to the retry path and the
	// stream flows on) or strict (the stream holds and retries it in place;
	// with lanes above 1, only the failed row's lane holds).
	Ordering string `yaml:"ordering"`
	// Lanes is the number of confirming channels rows are spread over by a
	// hash of their table's route.partition_key (docs/ordering.md). 1, the
	// default, publishes everything in commit order on one channel.
	Lanes int `yaml:"lanes"`
	// MaxInflightBytes bounds the rows (payloads and values) between the
	// router and the settle stage; reading the binlog waits when it is
	// used up. 0 means the relay's default (64 MiB).
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// HoldBackoff spaces the attempts while the stream holds behind one
	// message; unset, it follows retry.base and retry.max.
	HoldBackoff HoldBackoff `yaml:"hold_backoff"`
}

// Log configures zap.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"` // json or console
}

// Load reads, expands, parses and validates a config file.
func Load(path string) (*Config, error) {
	c, _, err := LoadWith(path, LoadOptions{})
	return c, err
}

// Parse parses config text: YAML first, then ${VAR} expansion in string
// values (expand.go), then presets, defaults, secrets and validation. Its
// errors name the key and the line but never show a value (redact.go).
func Parse(raw []byte, lookup func(string) (string, bool)) (*Config, error) {
	c, _, err := ParseWith(raw, lookup, LoadOptions{})
	return c, err
}

// LoadOptions change what a load reads.
type LoadOptions struct {
	// SkipAbsentFiles is for lint, which checks a config where the relay
	// is not deployed: a file the config names (a password_file, or with
	// tls.enabled a ca_file, cert_file or key_file) that does not exist
	// here is left out (no password, no such TLS setting) and returned as
	// an AbsentFile instead of refused. A file that exists is read, and
	// refused when bad, as by Load. Likewise an environment variable
	// ${VAR} without a default that is not set here: it expands to
	// nothing, and is returned (AbsentFile.Env) instead of refused.
	SkipAbsentFiles bool
}

// AbsentFile is a file the config names, or an environment variable it
// reads, that a load with SkipAbsentFiles did not find, and so did not
// check.
type AbsentFile struct {
	Key  string // its YAML key: source.password_file, redis.tls.ca_file
	Path string
	Env  string // the variable, when it is one (Path is empty then)
}

// String names the key and the path, shown as errors show a path
// (showPath): a password mistaken for one is not; or the variable.
func (f AbsentFile) String() string {
	if f.Env != "" {
		return fmt.Sprintf("%s: not checked: environment variable %s is not set here (check and run need it)", f.Key, f.Env)
	}
	return fmt.Sprintf("%s: not checked: %s does not exist here (check and run read it)", f.Key, showPath(f.Path))
}

// LoadWith is Load with options; it also returns the files it left out.
func LoadWith(path string, o LoadOptions) (*Config, []AbsentFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading config: %w", err)
	}
	return ParseWith(raw, os.LookupEnv, o)
}

// ParseWith is Parse with options; it also returns the files it left out.
func ParseWith(raw []byte, lookup func(string) (string, bool), o LoadOptions) (*Config, []AbsentFile, error) {
	var r redactions
	l := loader{LoadOptions: o}
	c, err := l.parse(raw, lookup, &r)
	if err != nil {
		return nil, nil, r.scrub(err)
	}
	return c, l.absent, nil
}

// loader is one load: its options and the files it left out.
type loader struct {
	LoadOptions
	absent []AbsentFile
}

// parse is ParseWith; it adds to r the values its errors must not show.
func (l *loader) parse(raw []byte, lookup func(string) (string, bool), r *redactions) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, syntaxError(err, raw) // yamlerr.go
	}
	r.addFile(&root)
	if err := errors.Join(unknownKeys(&root, reflect.TypeFor[Config](), "")...); err != nil {
		return nil, err
	}
	var unset func(path, name string)
	if l.SkipAbsentFiles {
		unset = func(path, name string) { l.absent = append(l.absent, AbsentFile{Key: path, Env: name}) }
	}
	if err := expandNode(&root, lookup, unset); err != nil {
		return nil, err
	}
	r.addFile(&root) // again: the values ${VAR} brought
	var c Config
	if len(root.Content) > 0 {
		// unknownKeys above refused unknown keys, by their full path.
		if err := root.Decode(&c); err != nil {
			return nil, decodeError(&root, reflect.TypeFor[Config](), "", err)
		}
	}
	for i := range c.RawTables {
		t, err := decodeTable(&c.RawTables[i], i)
		if err != nil {
			return nil, err
		}
		c.Tables = append(c.Tables, t)
	}
	c.applyDefaults()
	if err := l.resolveSecrets(&c); err != nil {
		return nil, err
	}
	if l.SkipAbsentFiles {
		l.skipAbsentTLS(&c) // connect.go
	}
	r.secrets = append(r.secrets, c.Source.Password, c.Primary.Password, c.Redis.Password, c.Redis.Sentinel.Password, urlPassword(c.Broker.Stream.URI))
	r.secrets = append(r.secrets, c.Broker.urlPasswords()...)
	for _, rc := range c.Reconcile.Consumers {
		r.secrets = append(r.secrets, rc.MySQL.Password)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// decodeTable applies a preset and then the table's own fields over it, with
// unknown keys refused.
func decodeTable(node *yaml.Node, i int) (*outbox.Table, error) {
	field := fmt.Sprintf("tables[%d]", i)
	if err := errors.Join(unknownKeys(node, reflect.TypeFor[outbox.Table](), field)...); err != nil {
		return nil, err
	}
	var head struct {
		Preset string `yaml:"preset"`
	}
	_ = node.Decode(&head)
	t := &outbox.Table{}
	if head.Preset != "" {
		p, err := outbox.Preset(head.Preset)
		switch {
		case err != nil && looksLikeName(head.Preset):
			return nil, fmt.Errorf("%s.preset: %w", field, err)
		case err != nil: // outbox's error would quote it
			return nil, fmt.Errorf("%s.preset: unknown preset (known: %s)", field, strings.Join(outbox.PresetNames(), ", "))
		}
		t = &p
	}
	// Decoded in place (not re-marshalled) so anchors and merge keys that
	// point at other parts of the file still resolve; unknownKeys above is
	// what refuses unknown keys.
	if err := node.Decode(t); err != nil {
		return nil, decodeError(node, reflect.TypeFor[outbox.Table](), field, err) // yamlerr.go
	}
	return t, nil
}

// unknownKeys walks a YAML node against the Go type it decodes into and
// reports every key the type has no field for, by its full path
// ("tables[0].columns.routing_ky") and position, so a typo in a mapping is
// named rather than silently ignored or reported by Go type name. A key
// that does not look like one is described instead (redact.go): it may be
// a value that lost its ':'.
func unknownKeys(node *yaml.Node, t reflect.Type, path string) []error {
	for node != nil && node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if node == nil || t == yamlNodeType {
		return nil
	}
	// A type that decodes itself decides what its keys are.
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	var errs []error
	switch {
	case node.Kind == yaml.DocumentNode:
		for _, n := range node.Content {
			errs = append(errs, unknownKeys(n, t, path)...)
		}
	case t.Kind() == reflect.Struct && node.Kind == yaml.MappingNode:
		fields, known := yamlFields(t) // yamlerr.go
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, val := node.Content[i], node.Content[i+1]
			if k.Value == "<<" { // a merge key: its mapping(s) belong here
				if val.Kind == yaml.SequenceNode {
					for _, m := range val.Content {
						errs = append(errs, unknownKeys(m, t, path)...)
					}
				} else {
					errs = append(errs, unknownKeys(val, t, path)...)
				}
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: unknown key (%s; known here: %s)",
					joinPath(path, unknownKeyName(k, val, known)), position(k), strings.Join(known, ", ")))
				continue
			}
			errs = append(errs, unknownKeys(val, ft, joinPath(path, k.Value))...)
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && node.Kind == yaml.SequenceNode:
		for i, n := range node.Content {
			errs = append(errs, unknownKeys(n, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	case t.Kind() == reflect.Map && node.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, val := node.Content[i], node.Content[i+1]
			errs = append(errs, unknownKeys(val, t.Elem(), joinPath(path, pathKey(k, val)))...)
		}
	}
	return errs
}

// applyDefaults fills the keys the config itself owns: the ones other keys
// are derived from or checked against. Keys a stage owns stay zero (the
// stage's default, applied by its constructor).
func (c *Config) applyDefaults() {
	c.Name = cmp.Or(c.Name, "binlog-relay")
	for _, m := range []*MySQL{&c.Source, &c.Primary} {
		m.Port = cmp.Or(m.Port, 3306)
		m.Flavor = cmp.Or(m.Flavor, "auto")
	}
	if len(c.Source.Hosts) > 0 && c.Source.Host == "" {
		first := c.Source.HostEntries()[0]
		c.Source.Host, c.Source.Port = first.Host, first.Port
	}
	c.Redis.defaults() // redis.go
	c.Checkpoint.Key = cmp.Or(c.Checkpoint.Key, c.RedisKeys().Checkpoint())
	// Not the relay's default: its zero means "hold at once".
	c.Checkpoint.OutageWindow = cmp.Or(c.Checkpoint.OutageWindow, 30*time.Second)
	c.Relay.Ordering = cmp.Or(c.Relay.Ordering, "relaxed")
	c.Relay.MarkRowImage = cmp.Or(c.Relay.MarkRowImage, "minimal")
	c.Relay.Lanes = cmp.Or(c.Relay.Lanes, 1)
	c.Log.Level = cmp.Or(c.Log.Level, "info")
	c.Log.Format = cmp.Or(c.Log.Format, "json")
	c.HTTP.defaults()
	c.Reconcile.defaults(c.RedisKeys().Reconcile())
	for _, t := range c.Tables {
		t.MaxRetries = cmp.Or(t.MaxRetries, 5)
	}
}

// resolveSecrets reads password files. A file's trailing newline is dropped.
// With SkipAbsentFiles one that does not exist is left out: the password
// stays as it is.
func (l *loader) resolveSecrets(c *Config) error {
	// read reads path into *into; it reports whether it did.
	read := func(field, path string, into *string) (bool, error) {
		if path == "" {
			return false, nil
		}
		b, err := os.ReadFile(path)
		if err != nil && l.SkipAbsentFiles && errors.Is(err, fs.ErrNotExist) {
			l.absent = append(l.absent, AbsentFile{Key: field, Path: path})
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: reading %s: %w", field, showPath(path), errors.Unwrap(err))
		}
		*into = strings.TrimRight(string(b), "\r\n")
		return true, nil
	}
	if _, err := read("source.password_file", c.Source.PasswordFile, &c.Source.Password); err != nil {
		return err
	}
	if _, err := read("primary.password_file", c.Primary.PasswordFile, &c.Primary.Password); err != nil {
		return err
	}
	if c.HTTP.ConsoleToken != "" && c.HTTP.ConsoleTokenFile != "" {
		return errors.New("http.console_token_file: set either it or http.console_token, not both")
	}
	if _, err := read("http.console_token_file", c.HTTP.ConsoleTokenFile, &c.HTTP.ConsoleToken); err != nil {
		return err
	}
	if _, err := read("redis.password_file", c.Redis.PasswordFile, &c.Redis.Password); err != nil {
		return err
	}
	if _, err := read("redis.sentinel.password_file", c.Redis.Sentinel.PasswordFile, &c.Redis.Sentinel.Password); err != nil {
		return err
	}
	for i := range c.Reconcile.Consumers {
		m := &c.Reconcile.Consumers[i].MySQL
		if _, err := read(fmt.Sprintf("reconcile.consumers[%d].mysql.password_file", i), m.PasswordFile, &m.Password); err != nil {
			return err
		}
	}
	var pw string
	ok, err := read("broker.password_file", c.Broker.PasswordFile, &pw)
	if err != nil {
		return err
	}
	if ok {
		if err := c.Broker.setPassword(pw); err != nil { // brokernodes.go
			return err
		}
	}
	ok, err = read("broker.stream.password_file", c.Broker.Stream.PasswordFile, &pw)
	if err != nil {
		return err
	}
	if ok {
		u, err := withPassword(c.Broker.Stream.URI, pw)
		if err != nil {
			return fmt.Errorf("broker.stream.uri: %w", err)
		}
		c.Broker.Stream.URI = u
	}
	return nil
}

// Validate checks every section; all problems are reported together, each
// naming its YAML key. It checks only what no stage owns: a key a stage
// takes (sweeper:, ha:, most of relay: and checkpoint:, broker.url/urls,
// window and max_message_bytes, relay.hold_backoff's bounds) is checked by
// the stage's Validate, which internal/app runs at start-up and in lint.
func (c *Config) Validate() error {
	var errs []error
	if err := ident.Check("name", strings.NewReplacer("-", "_", ".", "_").Replace(c.Name)); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateServers()...)
	errs = append(errs, c.Broker.validate()...)
	errs = append(errs, c.validateRedis()...) // redis.go
	errs = append(errs, c.validateRelay()...)
	if c.Log.Format != "json" && c.Log.Format != "console" {
		errs = append(errs, errors.New("log.format: not json or console"))
	}
	if _, err := zapcore.ParseLevel(c.Log.Level); err != nil {
		// Checked here, not only by the logger: zap's error quotes the value.
		errs = append(errs, errors.New("log.level: not debug, info, warn, error, dpanic, panic or fatal"))
	}
	if err := c.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Metrics.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Reconcile.Validate(c.Tables); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateTables()...)
	return errors.Join(errs...)
}

// validateServers checks `source:` and `primary:`.
func (c *Config) validateServers() []error {
	var errs []error
	if c.Primary.Host == "" { // source.host and .user: the binlog reader's (internal/app's stages)
		errs = append(errs, errors.New("primary.host: required"))
	}
	if c.Primary.User == "" {
		errs = append(errs, errors.New("primary.user: required"))
	}
	for _, s := range []struct {
		field string
		m     MySQL
	}{{"source", c.Source}, {"primary", c.Primary}} {
		if s.m.Flavor != "auto" && s.m.Flavor != "mysql" && s.m.Flavor != "mariadb" {
			errs = append(errs, fmt.Errorf("%s.flavor: not auto, mysql or mariadb", s.field))
		}
		errs = append(errs, validateManaged(s.field, s.m, s.field == "source")...) // managed.go
	}
	entries := c.Source.HostEntries()
	for i, e := range entries {
		if e.Host == "" || e.Port < 0 {
			errs = append(errs, fmt.Errorf("source.hosts[%d]: not host or host:port (a port from 1 to 65535)", i))
		}
	}
	if len(entries) > 0 && entries[0].Port > 0 && entries[0].Addr() != c.Source.Addr() {
		errs = append(errs, errors.New("source.host: set source.host/port or source.hosts, not both"))
	}
	if len(c.Primary.Hosts) > 0 {
		errs = append(errs, errors.New("primary.hosts: only the source takes a list of servers"))
	}
	return errs
}

// validate checks `broker:`; url, urls, window and max_message_bytes are
// the publisher's (publisher.Config.Validate).
func (b Broker) validate() []error {
	var errs []error
	if err := checkExchangeName(b.DeadLetterExchange); err != nil {
		errs = append(errs, fmt.Errorf("broker.dead_letter_exchange: %w", err))
	}
	return append(errs, b.Stream.validate()...)
}

// validate checks `broker.stream:`.
func (s Stream) validate() []error {
	var errs []error
	if !s.Enabled() {
		if s.URI != "" || s.PasswordFile != "" || s.MaxLengthBytes != 0 || s.MaxAge != 0 {
			errs = append(errs, errors.New("broker.stream.name: required with the other broker.stream keys"))
		}
		return errs
	}
	if err := checkExchangeName(s.Name); err != nil { // the same rules: a queue name
		errs = append(errs, fmt.Errorf("broker.stream.name: %w", err))
	}
	if s.URI != "" {
		if u, err := url.Parse(s.URI); err != nil || (u.Scheme != "rabbitmq-stream" && u.Scheme != "rabbitmq-stream+tls") || u.Host == "" {
			errs = append(errs, errors.New("broker.stream.uri: want rabbitmq-stream://user:password@host:5552/vhost (or rabbitmq-stream+tls://)"))
		}
	}
	if s.PasswordFile != "" && s.URI == "" {
		errs = append(errs, errors.New("broker.stream.password_file: needs broker.stream.uri (without it the stream uses broker.url's credentials)"))
	}
	if s.MaxLengthBytes < 0 {
		errs = append(errs, fmt.Errorf("broker.stream.max_length_bytes: %d must be positive", s.MaxLengthBytes))
	}
	if s.MaxAge < 0 || (s.MaxAge > 0 && s.MaxAge < time.Second) {
		errs = append(errs, fmt.Errorf("broker.stream.max_age: %s must be at least 1s", s.MaxAge))
	}
	return errs
}

// StreamURIs are the stream ports the stream lanes dial, in order:
// broker.stream.uri, or each node of broker.url / broker.urls with its host,
// credentials and vhost on the stream port (5552).
func (b Broker) StreamURIs() ([]string, error) {
	if b.Stream.URI != "" {
		return []string{b.Stream.URI}, nil
	}
	var out []string
	for _, node := range b.Nodes() {
		u, err := url.Parse(node)
		if err != nil {
			return nil, errors.New("broker.url: not a URL")
		}
		scheme := "rabbitmq-stream"
		if u.Scheme == "amqps" {
			scheme = "rabbitmq-stream+tls"
		}
		s := url.URL{Scheme: scheme, User: u.User, Host: net.JoinHostPort(u.Hostname(), "5552"), Path: u.Path}
		if s.Path == "" {
			s.Path = "/"
		}
		out = append(out, s.String())
	}
	return out, nil
}

// validateRelay checks `relay:`, whose lanes are checked against the tables.
func (c *Config) validateRelay() []error {
	var errs []error
	r := c.Relay // batch_size, max_inflight_bytes...: relay.Config.Validate
	if r.Ordering != "relaxed" && r.Ordering != "strict" {
		errs = append(errs, errors.New("relay.ordering: not relaxed or strict"))
	}
	if r.MarkRowImage != "minimal" && r.MarkRowImage != "full" {
		errs = append(errs, errors.New("relay.mark_row_image: not minimal or full"))
	}
	return append(errs, c.checkLanes()...)
}

// validateTables checks every `tables:` entry and refuses a table
// configured twice. Names differing only by case are two tables where the
// server tells them apart (lower_case_table_names=0, the Linux default);
// where it does not, the binlog reader refuses them at start.
func (c *Config) validateTables() []error {
	if len(c.Tables) == 0 {
		return []error{errors.New("tables: at least one outbox table is required")}
	}
	var errs []error
	seen := map[string]int{}
	for i, t := range c.Tables {
		field := fmt.Sprintf("tables[%d]", i)
		if err := t.Validate(field); err != nil {
			errs = append(errs, err)
		}
		if j, dup := seen[t.FullName()]; dup {
			errs = append(errs, fmt.Errorf("%s: table %s is already configured as tables[%d]", field, t.FullName(), j))
		}
		seen[t.FullName()] = i
	}
	return errs
}

// checkExchangeName refuses a dead-letter exchange name the broker would
// refuse or that would route back into the default exchange.
func checkExchangeName(name string) error {
	switch {
	case name == "":
		return nil
	case len(name) > 255:
		return fmt.Errorf("%d bytes, AMQP names are at most 255", len(name))
	case strings.HasPrefix(name, "amq."):
		return errors.New("starts with amq., a prefix the broker reserves")
	}
	return nil
}

// HostEntries is source.hosts, each entry (host or host:port, the
// section's port when it has none) as a section of its own: the one
// parse of the list. An entry's port is -1 when it is not a number from 1
// to 65535.
func (m MySQL) HostEntries() []MySQL {
	out := make([]MySQL, len(m.Hosts))
	for i, h := range m.Hosts {
		e := m
		e.Hosts = nil
		e.Host, e.Port = strings.Trim(h, "[]"), m.Port
		if host, port, err := net.SplitHostPort(h); err == nil {
			e.Host, e.Port = host, -1
			if n, err := strconv.Atoi(port); err == nil && n >= 1 && n <= 65535 {
				e.Port = n
			}
		}
		out[i] = e
	}
	return out
}

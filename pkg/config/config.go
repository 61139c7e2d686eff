// Package config reads the relay's YAML file: ${ENV} expansion for secrets,
// unknown keys refused, presets applied and overridden field by field, and
// every value validated before anything connects. Errors name the field.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/status"
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
	Retry      status.Backoff  `yaml:"retry"`
	Tables     []*outbox.Table `yaml:"-"`
	RawTables  []yaml.Node     `yaml:"tables"`
	Log        Log             `yaml:"log"`
	Sweeper    Sweeper         `yaml:"sweeper"`
	HTTP       HTTP            `yaml:"http"`
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
	// Flavor is mysql, mariadb or auto (detected).
	Flavor string `yaml:"flavor"`
	TLS    TLS    `yaml:"tls"`
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
	URL          string `yaml:"url"`
	PasswordFile string `yaml:"password_file"`
	Window       int    `yaml:"window"`
	TLS          TLS    `yaml:"tls"`
}

// Redis holds the checkpoint.
type Redis struct {
	Addr         string `yaml:"addr"`
	Username     string `yaml:"username"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	DB           int    `yaml:"db"`
	TLS          TLS    `yaml:"tls"`
}

// Checkpoint says where and how often the position is saved.
type Checkpoint struct {
	Key      string        `yaml:"key"`
	Interval time.Duration `yaml:"interval"`
}

// Relay tunes the binlog path.
type Relay struct {
	BatchSize     int           `yaml:"batch_size"`
	FlushInterval time.Duration `yaml:"flush_interval"`
	Buffer        int           `yaml:"buffer"`
	DrainTimeout  time.Duration `yaml:"drain_timeout"`
	Heartbeat     time.Duration `yaml:"heartbeat"`
}

// Log configures zap.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"` // json or console
}

// Load reads, expands, parses and validates a config file.
func Load(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(raw, os.LookupEnv)
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expand replaces ${VAR} and ${VAR:-default}. A $ not followed by { is left
// alone ($ is legal in MySQL identifiers). An unset variable without a
// default is an error naming it (never its value).
func expand(raw []byte, lookup func(string) (string, bool)) ([]byte, error) {
	var missing []string
	out := envRef.ReplaceAllFunc(raw, func(m []byte) []byte {
		sub := envRef.FindSubmatch(m)
		if v, ok := lookup(string(sub[1])); ok {
			return []byte(v)
		}
		if len(sub[2]) > 0 {
			return sub[3]
		}
		missing = append(missing, string(sub[1]))
		return nil
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("config refers to unset environment variables: %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// Parse parses config text.
func Parse(raw []byte, lookup func(string) (string, bool)) (*Config, error) {
	expanded, err := expand(raw, lookup)
	if err != nil {
		return nil, err
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parsing config: %w", err)
	}
	for i := range c.RawTables {
		t, err := decodeTable(&c.RawTables[i], i)
		if err != nil {
			return nil, err
		}
		c.Tables = append(c.Tables, t)
	}
	c.applyDefaults()
	if err := c.resolveSecrets(); err != nil {
		return nil, err
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
	var head struct {
		Preset string `yaml:"preset"`
	}
	_ = node.Decode(&head)
	t := &outbox.Table{}
	if head.Preset != "" {
		p, err := outbox.Preset(head.Preset)
		if err != nil {
			return nil, fmt.Errorf("%s.preset: %w", field, err)
		}
		t = &p
	}
	b, err := yaml.Marshal(node)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(t); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return t, nil
}

func (c *Config) applyDefaults() {
	if c.Name == "" {
		c.Name = "binlog-relay"
	}
	for _, m := range []*MySQL{&c.Source, &c.Primary} {
		if m.Port == 0 {
			m.Port = 3306
		}
		if m.Flavor == "" {
			m.Flavor = "auto"
		}
	}
	if c.Redis.Addr == "" {
		c.Redis.Addr = "127.0.0.1:6379"
	}
	if c.Checkpoint.Key == "" {
		c.Checkpoint.Key = "binlog-relay:" + c.Name + ":checkpoint"
	}
	if c.Checkpoint.Interval == 0 {
		c.Checkpoint.Interval = time.Second
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "json"
	}
	c.Retry.Defaults()
	for _, t := range c.Tables {
		if t.MaxRetries == 0 {
			t.MaxRetries = 5
		}
	}
}

// resolveSecrets reads password files. A file's trailing newline is dropped.
func (c *Config) resolveSecrets() error {
	read := func(field, path string, into *string) error {
		if path == "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s: reading %s: %w", field, path, errors.Unwrap(err))
		}
		*into = strings.TrimRight(string(b), "\r\n")
		return nil
	}
	if err := read("source.password_file", c.Source.PasswordFile, &c.Source.Password); err != nil {
		return err
	}
	if err := read("primary.password_file", c.Primary.PasswordFile, &c.Primary.Password); err != nil {
		return err
	}
	if err := read("redis.password_file", c.Redis.PasswordFile, &c.Redis.Password); err != nil {
		return err
	}
	if c.Broker.PasswordFile != "" {
		var pw string
		if err := read("broker.password_file", c.Broker.PasswordFile, &pw); err != nil {
			return err
		}
		u, err := withPassword(c.Broker.URL, pw)
		if err != nil {
			return fmt.Errorf("broker.url: %w", err)
		}
		c.Broker.URL = u
	}
	return nil
}

// Validate checks every section; all problems are reported together.
func (c *Config) Validate() error {
	var errs []error
	if err := outbox.CheckIdent("name", strings.NewReplacer("-", "_", ".", "_").Replace(c.Name)); err != nil {
		errs = append(errs, err)
	}
	for _, s := range []struct {
		field string
		m     MySQL
	}{{"source", c.Source}, {"primary", c.Primary}} {
		if s.m.Host == "" {
			errs = append(errs, fmt.Errorf("%s.host: required", s.field))
		}
		if s.m.User == "" {
			errs = append(errs, fmt.Errorf("%s.user: required", s.field))
		}
		if s.m.Flavor != "auto" && s.m.Flavor != "mysql" && s.m.Flavor != "mariadb" {
			errs = append(errs, fmt.Errorf("%s.flavor: %q is not auto, mysql or mariadb", s.field, s.m.Flavor))
		}
	}
	if c.Broker.URL == "" {
		errs = append(errs, errors.New("broker.url: required"))
	} else if err := checkAMQPURL(c.Broker.URL); err != nil {
		errs = append(errs, fmt.Errorf("broker.url: %w", err))
	}
	if c.Checkpoint.Interval < 0 {
		errs = append(errs, errors.New("checkpoint.interval: must be positive"))
	}
	if c.Relay.BatchSize < 0 {
		errs = append(errs, errors.New("relay.batch_size: must be positive"))
	}
	if c.Log.Format != "json" && c.Log.Format != "console" {
		errs = append(errs, fmt.Errorf("log.format: %q is not json or console", c.Log.Format))
	}
	if len(c.Tables) == 0 {
		errs = append(errs, errors.New("tables: at least one outbox table is required"))
	}
	seen := map[string]int{}
	for i, t := range c.Tables {
		field := fmt.Sprintf("tables[%d]", i)
		if err := t.Validate(field); err != nil {
			errs = append(errs, err)
		}
		if j, dup := seen[strings.ToLower(t.FullName())]; dup {
			errs = append(errs, fmt.Errorf("%s: table %s is already configured as tables[%d]", field, t.FullName(), j))
		}
		seen[strings.ToLower(t.FullName())] = i
	}
	return errors.Join(errs...)
}

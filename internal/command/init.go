package command

// binlog-relay init: write a config from the outbox tables themselves
// (internal/discover reads and maps them), then lint it.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/discover"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
)

// InitOptions are `binlog-relay init`'s flags.
type InitOptions struct {
	// Source and Primary are go-sql-driver DSNs (user@tcp(host:3306)/)
	// or mysql:// URLs. Init reads the tables on Source only.
	Source, Primary string
	// Tables are schema.table, one or more.
	Tables []string
	// Broker is an amqp:// or amqps:// URL; Redis is host:port. Either may
	// be empty: a placeholder is written, and said so.
	Broker, Redis string
	// Out is the file to write; empty: stdout. An existing file is not
	// overwritten.
	Out string
}

// Flags registers init's flags on fs.
func (o *InitOptions) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.Source, "source", "", "the replica to read the table on, as a DSN: relay@tcp(10.0.0.12:3306)/ or mysql://relay@10.0.0.12:3306/ (password: $RELAY_DB_PASSWORD, not the command line)")
	fs.StringVar(&o.Primary, "primary", "", "the primary where rows are marked sent, as a DSN (not contacted by init)")
	fs.Func("table", "the outbox table, schema.table (repeatable)", func(s string) error {
		o.Tables = append(o.Tables, s)
		return nil
	})
	fs.StringVar(&o.Broker, "broker", "", "RabbitMQ URL, amqp://relay@10.0.0.20:5672/ (a password in it is written as ${RELAY_BROKER_PASSWORD})")
	fs.StringVar(&o.Redis, "redis", "", "Redis address, host:port (default 127.0.0.1:6379)")
	fs.StringVar(&o.Out, "out", "", "write the config to this file (it must not exist) instead of stdout")
	// The config file init writes is not read: --config does not apply.
}

// Validate checks the flags before anything connects.
func (o *InitOptions) Validate() error {
	var errs []error
	if o.Source == "" {
		errs = append(errs, errors.New("init: --source is required: the replica to read the table on"))
	}
	if o.Primary == "" {
		errs = append(errs, errors.New("init: --primary is required: the server where rows are marked sent"))
	}
	if len(o.Tables) == 0 {
		errs = append(errs, errors.New("init: --table schema.table is required"))
	}
	for _, t := range o.Tables {
		if s, n, ok := strings.Cut(t, "."); !ok || s == "" || n == "" || strings.Contains(n, ".") {
			errs = append(errs, fmt.Errorf("init: --table %q: want schema.table", t))
		}
	}
	for _, d := range []struct{ flag, dsn string }{{"--source", o.Source}, {"--primary", o.Primary}} {
		if d.dsn != "" {
			if _, err := ParseServerDSN(d.flag, d.dsn); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if o.Broker != "" {
		if _, _, err := brokerURL(o.Broker); err != nil {
			errs = append(errs, err)
		}
	}
	if o.Redis != "" {
		if _, _, err := net.SplitHostPort(o.Redis); err != nil || strings.Contains(o.Redis, "/") {
			errs = append(errs, errors.New("init: --redis: want host:port, such as 10.0.0.30:6379"))
		}
	}
	return errors.Join(errs...)
}

// InitRefusedError is what init refuses because of its input: a table
// that is not there or cannot be mapped, a --out that exists, a config
// lint refuses. cmd/binlog-relay exits 2 on it, 1 on any other error (a
// server that did not answer).
type InitRefusedError struct{ Err error }

func (e *InitRefusedError) Error() string { return e.Err.Error() }
func (e *InitRefusedError) Unwrap() error { return e.Err }

func refused(format string, args ...any) error {
	return &InitRefusedError{Err: fmt.Errorf(format, args...)}
}

// InitLint lints a config's text as `binlog-relay lint` would.
type InitLint func(raw []byte) ([]preflight.Problem, error)

// Init reads the tables on the source, proposes their mapping, writes the
// config to o.Out or stdout and lints it. What it could not decide is in
// the config as comments and on stderr. lookup reads the environment (the
// passwords it connects with).
func Init(ctx context.Context, o InitOptions, lookup func(string) (string, bool), lint InitLint, stdout, stderr io.Writer) error {
	if err := o.Validate(); err != nil {
		return &InitRefusedError{Err: err}
	}
	if o.Out != "" {
		if _, err := os.Stat(o.Out); err == nil {
			return refused("init: --out %s exists: init does not overwrite a config; remove it or choose another file", o.Out)
		}
	}
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "binlog-relay init: "+format+"\n", args...) }
	settings, sourceCfg, err := initSettings(o, lookup, say)
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", sourceCfg.FormatDSN())
	if err != nil {
		return fmt.Errorf("init: opening the source: %w", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var tables []*discover.Table
	var proposals []*discover.Proposal
	var unmappable []error
	for _, full := range o.Tables {
		schema, name, _ := strings.Cut(full, ".")
		t, err := discover.Describe(ctx, db, schema, name)
		if errors.Is(err, discover.ErrNoTable) {
			unmappable = append(unmappable, err)
			continue
		}
		if err != nil {
			return fmt.Errorf("init: on the source %s: %w", sourceCfg.Addr, err)
		}
		p, err := discover.Propose(t)
		if err != nil {
			unmappable = append(unmappable, err)
			continue
		}
		if p.Preset != "" {
			say("%s: recognised the %s preset", full, p.Preset)
		} else {
			say("%s: a mapping of its own (no preset has all of its columns)", full)
		}
		for _, n := range p.Notes {
			say("%s: not decided: %s", full, n)
		}
		tables, proposals = append(tables, t), append(proposals, p)
	}
	if len(unmappable) > 0 {
		return refused("init: %w", errors.Join(unmappable...))
	}
	for _, n := range settings.Notes {
		say("not decided: %s", n)
	}
	settings.File = o.Out
	var out bytes.Buffer
	if err := discover.Render(&out, settings, tables, proposals); err != nil {
		return err
	}
	problems, lintErr := lint(out.Bytes())
	where := "stdout"
	if o.Out != "" {
		where = o.Out
		// O_EXCL: a file made since the check above is not overwritten.
		f, err := os.OpenFile(o.Out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return refused("init: %w", err)
		}
		if _, err := f.Write(out.Bytes()); err != nil {
			f.Close()
			return fmt.Errorf("init: writing %s: %w", o.Out, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("init: writing %s: %w", o.Out, err)
		}
	} else if _, err := stdout.Write(out.Bytes()); err != nil {
		return err
	}
	if lintErr != nil {
		return refused("init: the config written to %s does not load: %w", where, lintErr)
	}
	for _, p := range problems {
		say("lint: %s", p)
	}
	if preflight.HasErrors(problems) {
		return refused("init: lint refuses the config written to %s (above)", where)
	}
	next := "FILE"
	if o.Out != "" {
		next = o.Out
	}
	say("wrote the config to %s; lint: OK. Next: binlog-relay check --config %s", where, next)
	return nil
}

// initSettings turns the flags into the config's connections, with
// passwords as ${VAR} references, and the source's connection for init.
func initSettings(o InitOptions, lookup func(string) (string, bool), say func(string, ...any)) (discover.Settings, *mysql.Config, error) {
	var s discover.Settings
	src, _ := ParseServerDSN("--source", o.Source) // Validate parsed them
	pri, _ := ParseServerDSN("--primary", o.Primary)
	srcVar, priVar := "RELAY_DB_PASSWORD", "RELAY_DB_PASSWORD"
	if src.User != pri.User {
		srcVar, priVar = "RELAY_SOURCE_PASSWORD", "RELAY_PRIMARY_PASSWORD"
	}
	server := func(flag string, c *mysql.Config, passwordVar string) discover.Server {
		host, port, _ := net.SplitHostPort(c.Addr)
		p, _ := strconv.Atoi(port)
		sv := discover.Server{Host: host, Port: p, User: c.User, TLS: c.TLSConfig != "" && c.TLSConfig != "false"}
		env, set := lookup(passwordVar)
		switch {
		case c.Passwd != "":
			say("the %s DSN holds a password, which other users of this machine can see in the process list: "+
				"the config reads it from $%s instead (set it before check and run)", flag, passwordVar)
			sv.PasswordVar = passwordVar
		case set:
			c.Passwd = env
			sv.PasswordVar = passwordVar
		default:
			say("%s: no password in the DSN and $%s is not set: the config names none", flag, passwordVar)
		}
		return sv
	}
	s.Source = server("--source", src, srcVar)
	s.Primary = server("--primary", pri, priVar)
	schema, _, _ := strings.Cut(o.Tables[0], ".")
	s.Name = strings.NewReplacer("_", "-").Replace(strings.ToLower(schema)) + "-relay"
	if o.Broker != "" {
		u, hadPassword, _ := brokerURL(o.Broker)
		s.BrokerURL = u
		switch {
		case hadPassword:
			say("the --broker URL holds a password: the config reads it from $RELAY_BROKER_PASSWORD instead (set it before check and run)")
		case strings.Contains(u, "${RELAY_BROKER_PASSWORD}"):
			say("the config reads the broker user's password from $RELAY_BROKER_PASSWORD (set it before check and run)")
		}
	} else {
		s.Notes = append(s.Notes, discover.Note{Key: "broker.url", Text: "--broker was not given: set your RabbitMQ's URL (its password as ${RELAY_BROKER_PASSWORD})"})
	}
	if o.Redis != "" {
		s.RedisAddr = o.Redis
	} else {
		s.Notes = append(s.Notes, discover.Note{Key: "redis.addr", Text: "--redis was not given: 127.0.0.1:6379 written, set your Redis"})
	}
	src.ParseTime = false
	src.Timeout, src.ReadTimeout = 10*time.Second, 30*time.Second
	return s, src, nil
}

// ParseServerDSN reads a MySQL server given on the command line: a
// go-sql-driver DSN (user:password@tcp(host:3306)/db?tls=true) or a URL
// (mysql://user:password@host:3306/db). Its errors never show the text,
// which may hold a password.
func ParseServerDSN(flag, dsn string) (*mysql.Config, error) {
	bad := fmt.Errorf("init: %s: not a DSN: want user@tcp(host:3306)/ or mysql://user@host:3306/", flag)
	if strings.HasPrefix(dsn, "mysql://") {
		u, err := url.Parse(dsn)
		if err != nil || u.Host == "" || u.User == nil {
			return nil, bad
		}
		c := mysql.NewConfig()
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
		c.Net, c.Addr = "tcp", u.Host
		if u.Port() == "" {
			c.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		if v := u.Query().Get("tls"); v != "" {
			c.TLSConfig = v
		}
		return c, nil
	}
	c, err := mysql.ParseDSN(dsn)
	if err != nil || c.User == "" || c.Net != "tcp" {
		return nil, bad
	}
	return c, nil
}

// brokerURL checks an AMQP URL and puts ${RELAY_BROKER_PASSWORD} in place
// of its password: the one it holds (had), or the one a URL with a user
// and no password leaves to be set.
func brokerURL(raw string) (u string, had bool, err error) {
	parsed, err := url.Parse(raw)
	if err != nil || (parsed.Scheme != "amqp" && parsed.Scheme != "amqps") || parsed.Host == "" {
		return "", false, errors.New("init: --broker: want amqp://user@host:5672/ or amqps://")
	}
	if parsed.User == nil || parsed.User.Username() == "" {
		return parsed.String(), false, nil // the broker's default user
	}
	pw, _ := parsed.User.Password()
	had = pw != ""
	user := parsed.User.Username()
	parsed.User = url.User(user)
	esc := url.User(user).String()
	return strings.Replace(parsed.String(), "://"+esc+"@", "://"+esc+":${RELAY_BROKER_PASSWORD}@", 1), had, nil
}

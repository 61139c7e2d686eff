package config

import (
	"cmp"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// TLSConfig builds a tls.Config, or nil when TLS is off.
func (t TLS) TLSConfig(field string) (*tls.Config, error) {
	if !t.Enabled {
		// Files named without enabled: true would otherwise mean a plain
		// connection the operator believes is encrypted.
		if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" {
			return nil, fmt.Errorf("%s.tls: ca_file, cert_file, key_file or server_name is set but tls.enabled is false: set enabled: true (or remove them)", field)
		}
		return nil, nil
	}
	c := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.tls.ca_file: %w", field, errors.Unwrap(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.tls.ca_file: %s holds no PEM certificate", field, t.CAFile)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.tls.cert_file/key_file: %w", field, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// skipAbsentTLS leaves out, for lint (SkipAbsentFiles), each TLS file of
// an enabled tls: section that does not exist here, and records it: a CA
// alone, or the certificate and key together (one is no use without the
// other). Present files stay, for TLSConfig to check.
func (l *loader) skipAbsentTLS(c *Config) {
	type section struct {
		field string
		t     *TLS
	}
	sections := []section{{"source", &c.Source.TLS}, {"primary", &c.Primary.TLS}, {"broker", &c.Broker.TLS}, {"redis", &c.Redis.TLS}}
	for i := range c.Reconcile.Consumers {
		sections = append(sections, section{fmt.Sprintf("reconcile.consumers[%d].mysql", i), &c.Reconcile.Consumers[i].MySQL.TLS})
	}
	for _, s := range sections {
		if !s.t.Enabled { // TLSConfig refuses files without enabled: true, there or not
			continue
		}
		absent := func(key, path string) bool {
			if path == "" {
				return false
			}
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				return false
			}
			l.absent = append(l.absent, AbsentFile{Key: s.field + ".tls." + key, Path: path})
			return true
		}
		if absent("ca_file", s.t.CAFile) {
			s.t.CAFile = ""
		}
		if cert, key := absent("cert_file", s.t.CertFile), absent("key_file", s.t.KeyFile); cert || key {
			s.t.CertFile, s.t.KeyFile = "", ""
		}
	}
}

// TLSConfig is the MySQL connection's TLS, with the server name defaulting
// to the host: go-mysql's binlog client hands the config to tls.Client as it
// is, and Go refuses a handshake with neither a server name nor
// InsecureSkipVerify.
func (m MySQL) TLSConfig(field string) (*tls.Config, error) {
	c, err := m.TLS.TLSConfig(field)
	if err != nil || c == nil {
		return c, err
	}
	if c.ServerName == "" && !c.InsecureSkipVerify {
		c.ServerName = m.Host
	}
	return c, nil
}

// TLSConfig is the broker's TLS. TLS needs an amqps:// URL: with amqp://
// the AMQP client would ignore the settings and connect in plain text.
func (b Broker) TLSConfig() (*tls.Config, error) {
	c, err := b.TLS.TLSConfig("broker")
	if err != nil || c == nil {
		return c, err
	}
	for _, raw := range b.Nodes() {
		if u, perr := url.Parse(raw); perr == nil && u.Scheme != "amqps" {
			return nil, errors.New("broker.tls: TLS is enabled but broker.url is not amqps://: use amqps://host:5671/")
		}
	}
	return c, nil
}

// Addr is host:port.
func (m MySQL) Addr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

var tlsRegistry sync.Map

// DriverConfig is the section's go-sql-driver configuration (field names
// it in errors): its address, user and TLS, and the relay's connection
// options (relayOptions). Every connection the relay makes to MySQL is
// configured here, or by ConsumerDriverConfig from a DSN the user wrote.
func (m MySQL) DriverConfig(field string) (*mysql.Config, error) {
	c := mysql.NewConfig()
	c.Net = "tcp"
	c.Addr = m.Addr()
	c.User = m.User
	c.Passwd = m.Password
	relayOptions(c)
	tc, err := m.TLSConfig(field)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		// The driver's TLS registry is process-wide: the name carries the
		// settings, so two relays in one process (tests) with different
		// certificates do not get each other's.
		sum := sha256.Sum256(fmt.Appendf(nil, "%s|%+v", m.Host, m.TLS))
		name := fmt.Sprintf("binlog-relay-%s-%x", field, sum[:8])
		if _, loaded := tlsRegistry.LoadOrStore(name, true); !loaded {
			if err := mysql.RegisterTLSConfig(name, tc); err != nil {
				return nil, fmt.Errorf("%s.tls: %w", field, err)
			}
		}
		c.TLSConfig = name
	}
	return c, nil
}

// relayOptions are the options of every connection of the relay, kept
// where a DSN the user wrote sets its own timeouts. Statements are
// interpolated client-side so each one is a single round trip (no
// prepare/execute/close), which is what keeps the relay's statement count
// on the primary low.
func relayOptions(c *mysql.Config) {
	c.ParseTime = true
	c.InterpolateParams = true
	c.Timeout = cmp.Or(c.Timeout, 5*time.Second)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, 60*time.Second)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, 60*time.Second)
}

// Redacted describes a MySQL connection without its password.
func (m MySQL) Redacted() string { return m.User + "@" + m.Addr() }

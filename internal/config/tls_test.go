package config

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

func TestTLSConfigsAreBuiltForEveryConnection(t *testing.T) {
	pki := testenv.NewPKI(t, "db.test")
	full := TLS{Enabled: true, CAFile: pki.CAFile, CertFile: pki.CertFile, KeyFile: pki.KeyFile, ServerName: "db.test"}

	// The same builder serves MySQL (both connections), RabbitMQ and Redis.
	for _, field := range []string{"source", "primary", "broker", "redis"} {
		c, err := full.TLSConfig(field)
		if err != nil {
			t.Fatalf("%s: %v", field, err)
		}
		if c.ServerName != "db.test" {
			t.Errorf("%s: server name %q", field, c.ServerName)
		}
		if len(c.Certificates) != 1 || len(c.Certificates[0].Certificate) != 1 {
			t.Errorf("%s: client certificate not loaded", field)
		}
		if _, err := pki.Leaf.Verify(x509.VerifyOptions{Roots: c.RootCAs, DNSName: "db.test"}); err != nil {
			t.Errorf("%s: the CA pool does not verify a certificate the CA signed: %v", field, err)
		}
		if c.MinVersion < 0x0303 {
			t.Errorf("%s: min version %x", field, c.MinVersion)
		}
	}

	// MySQL: the server name defaults to the host (go-mysql's binlog client
	// needs it set), and the DSN names a TLS config registered for it.
	m := MySQL{Host: "db.test", Port: 3306, User: "relay", Password: "pw", TLS: TLS{Enabled: true, CAFile: pki.CAFile}}
	c, err := m.TLSConfig("source")
	if err != nil || c.ServerName != "db.test" {
		t.Fatalf("source TLS: %v, server name %q", err, c.ServerName)
	}
	dsn1, err := dsnOf(m)
	if err != nil || !strings.Contains(dsn1, "tls=binlog-relay-source-") {
		t.Fatalf("DSN %q: %v", dsn1, err)
	}
	other := m
	other.TLS.ServerName = "other.test"
	dsn2, _ := dsnOf(other)
	if dsn1 == dsn2 {
		t.Error("two different TLS settings share one registered config")
	}
	plain, _ := dsnOf(MySQL{Host: "h", Port: 3306, User: "u"})
	if strings.Contains(plain, "tls=") {
		t.Errorf("TLS off, but the DSN asks for it: %s", plain)
	}

	// RabbitMQ: TLS needs amqps://.
	b := Broker{URL: "amqps://relay:pw@rabbit.test:5671/", TLS: full}
	if c, err := b.TLSConfig(); err != nil || c == nil || c.ServerName != "db.test" {
		t.Errorf("broker TLS: %v", err)
	}
	b.URL = "amqp://relay:pw@rabbit.test:5672/"
	if _, err := b.TLSConfig(); err == nil || !strings.Contains(err.Error(), "amqps://") {
		t.Errorf("TLS with amqp:// accepted: %v", err)
	}
	if strings.Contains(errString(b.TLSConfig()), "pw") {
		t.Error("broker TLS error carries the password")
	}

	for _, c := range []struct {
		name string
		tls  TLS
		want string
	}{
		{"missing CA", TLS{Enabled: true, CAFile: filepath.Join(t.TempDir(), "nope.pem")}, "redis.tls.ca_file"},
		{"not PEM", TLS{Enabled: true, CAFile: pki.KeyFile + ".txt"}, "redis.tls.ca_file"},
		{"key without cert", TLS{Enabled: true, KeyFile: pki.KeyFile}, "redis.tls.cert_file/key_file"},
		{"files but not enabled", TLS{CAFile: pki.CAFile}, "tls.enabled is false"},
	} {
		if c.name == "not PEM" {
			_ = os.WriteFile(c.tls.CAFile, []byte("not a certificate"), 0o600)
		}
		_, err := c.tls.TLSConfig("redis")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
	if c, err := (TLS{}).TLSConfig("redis"); c != nil || err != nil {
		t.Errorf("TLS off: %v %v", c, err)
	}
}

func errString[T any](_ T, err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// dsnOf is the source section's driver configuration as a DSN.
func dsnOf(m MySQL) (string, error) {
	c, err := m.DriverConfig("source")
	if err != nil {
		return "", err
	}
	return c.FormatDSN(), nil
}

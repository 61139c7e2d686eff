package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPKI writes a CA and a certificate it signed (for "db.test") into dir.
type testPKI struct {
	ca, cert, key string
	caCert        *x509.Certificate
	leaf          *x509.Certificate
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "relay test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "db.test"},
		DNSNames: []string{"db.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(leafDER)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	p := testPKI{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem"), caCert: caCert, leaf: leaf}
	write := func(path, typ string, der []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(p.ca, "CERTIFICATE", caDER)
	write(p.cert, "CERTIFICATE", leafDER)
	write(p.key, "EC PRIVATE KEY", keyDER)
	return p
}

func TestTLSConfigsAreBuiltForEveryConnection(t *testing.T) {
	pki := newTestPKI(t)
	full := TLS{Enabled: true, CAFile: pki.ca, CertFile: pki.cert, KeyFile: pki.key, ServerName: "db.test"}

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
		if _, err := pki.leaf.Verify(x509.VerifyOptions{Roots: c.RootCAs, DNSName: "db.test"}); err != nil {
			t.Errorf("%s: the CA pool does not verify a certificate the CA signed: %v", field, err)
		}
		if c.MinVersion < 0x0303 {
			t.Errorf("%s: min version %x", field, c.MinVersion)
		}
	}

	// MySQL: the server name defaults to the host (go-mysql's binlog client
	// needs it set), and the DSN names a TLS config registered for it.
	m := MySQL{Host: "db.test", Port: 3306, User: "relay", Password: "pw", TLS: TLS{Enabled: true, CAFile: pki.ca}}
	c, err := m.TLSConfig("source")
	if err != nil || c.ServerName != "db.test" {
		t.Fatalf("source TLS: %v, server name %q", err, c.ServerName)
	}
	dsn1, err := m.DSN("source")
	if err != nil || !strings.Contains(dsn1, "tls=binlog-relay-source-") {
		t.Fatalf("DSN %q: %v", dsn1, err)
	}
	other := m
	other.TLS.ServerName = "other.test"
	dsn2, _ := other.DSN("source")
	if dsn1 == dsn2 {
		t.Error("two different TLS settings share one registered config")
	}
	plain, _ := MySQL{Host: "h", Port: 3306, User: "u"}.DSN("source")
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
		{"not PEM", TLS{Enabled: true, CAFile: pki.key + ".txt"}, "redis.tls.ca_file"},
		{"key without cert", TLS{Enabled: true, KeyFile: pki.key}, "redis.tls.cert_file/key_file"},
		{"files but not enabled", TLS{CAFile: pki.ca}, "tls.enabled is false"},
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

package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a CA and one certificate it signed, written as PEM files into the
// test's temp dir, for the TLS settings of a config under test.
type PKI struct {
	CAFile, CertFile, KeyFile string
	CA, Leaf                  *x509.Certificate
}

// NewPKI issues a P-256 CA and a leaf named dnsNames (the first one is its
// common name; none gives "relay"), usable as client and server
// certificate, valid from an hour ago to an hour from now.
func NewPKI(t testing.TB, dnsNames ...string) *PKI {
	t.Helper()
	cn := "relay"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	dir := t.TempDir()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "relay test CA"},
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caKey, caDER := issue(t, ca, nil, nil)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, DNSNames: dnsNames,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	p := &PKI{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	p.CA = parseCert(t, caDER)
	leafKey, leafDER := issue(t, leaf, p.CA, caKey)
	p.Leaf = parseCert(t, leafDER)
	keyDER, err := x509.MarshalECPrivateKey(leafKey)
	if err != nil {
		t.Fatalf("encoding the test key: %v", err)
	}
	writePEM(t, p.CAFile, "CERTIFICATE", caDER)
	writePEM(t, p.CertFile, "CERTIFICATE", leafDER)
	writePEM(t, p.KeyFile, "EC PRIVATE KEY", keyDER)
	return p
}

// issue makes a key for tmpl and signs it by parent with parentKey, or by
// itself when parent is nil.
func issue(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generating a test key: %v", err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatalf("issuing %s: %v", tmpl.Subject.CommonName, err)
	}
	return key, der
}

package testenv

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
)

// The PEM side of NewPKI: what it writes and reads back.

func parseCert(t testing.TB, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parsing a test certificate: %v", err)
	}
	return c
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

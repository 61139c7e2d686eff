package sourceinfo

import (
	"errors"
	"testing"
)

func TestExplainAndHandshake(t *testing.T) {
	drv := errors.New("unexpected resp from server for caching_sha2_password, perform full authentication")
	if err := Explain(drv); !errors.Is(err, ErrNoRSAKey) || !errors.Is(Explain(err), ErrNoRSAKey) {
		t.Fatalf("Explain(driver error) = %v; want ErrNoRSAKey", err)
	}
	other := errors.New("connection refused")
	if err := Explain(other); err != other {
		t.Fatalf("Explain(other) = %v; want it unchanged", err)
	}
	if err := Handshake(func() error { var m map[string]int; m["x"]++; return nil }); err == nil || errors.Is(err, ErrNoRSAKey) {
		t.Fatalf("a panic elsewhere: %v; want an error naming the panic", err)
	}
	if err := Handshake(func() error { return drv }); !errors.Is(err, ErrNoRSAKey) {
		t.Fatalf("Handshake(driver error) = %v", err)
	}
}

package main

import (
	"bytes"
	"testing"
)

// A build without -ldflags (go test, go run) says so; test/deploy checks the stamped
// builds (Makefile, Dockerfile, goreleaser).
func TestVersionUnstamped(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got, want := out.String(), "binlog-relay dev (commit unknown)\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

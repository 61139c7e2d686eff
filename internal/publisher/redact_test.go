package publisher

import (
	"errors"
	"strings"
	"testing"
)

func TestRedactHidesPasswords(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://relay:s3cr3t@10.0.0.1:5672/vh":  "amqp://relay:xxxxx@10.0.0.1:5672/vh",
		"amqps://relay:p%40ss@broker:5671/":     "amqps://relay:xxxxx@broker:5671/",
		"amqp://guest@127.0.0.1:5672/":          "amqp://guest@127.0.0.1:5672/",
		"amqp://127.0.0.1:5672/":                "amqp://127.0.0.1:5672/",
		"amqp://u:pw@[::1]:5672/?heartbeat=10s": "amqp://u:xxxxx@[::1]:5672/?heartbeat=10s",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	err := Scrub(errors.New("dial amqp://relay:s3cr3t@host: refused s3cr3t"), "amqp://relay:s3cr3t@host/")
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("Scrub left the password: %v", err)
	}
}

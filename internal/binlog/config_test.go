package binlog

import (
	"strings"
	"testing"

	"go.uber.org/zap"
)

// New fills the defaults and refuses an invalid Config, each bad field
// named by its YAML key.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	if _, err := New(Config{Host: "x", Port: 1, User: "u", Flavor: FlavorMySQL}, nil, nil, zap.NewNop()); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	_, err := New(Config{Flavor: "auto", XABufferRows: -1}, nil, nil, zap.NewNop())
	for _, want := range []string{"source.host: required", "source.port: required", "source.user: required",
		`source.flavor: "auto"`, "source.xa_buffer_rows: -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
}

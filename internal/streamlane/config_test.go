package streamlane

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

func TestValidate(t *testing.T) {
	const pw = "Pa55-w0rd-x"
	ok := func() Config {
		return Config{URIs: []string{"rabbitmq-stream://relay:" + pw + "@broker:5552/"}, Stream: "orders", ProducerName: "relay-1"}
	}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want []string // each in the error; none: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"tls, vhost, no port", func(c *Config) { c.URIs = []string{"rabbitmq-stream+tls://u:p@h/prod"} }, nil},
		{"no uri", func(c *Config) { c.URIs = nil }, []string{"stream.uris: required"}},
		{"amqp scheme", func(c *Config) { c.URIs = []string{"amqp://relay:" + pw + "@h:5672/"} },
			[]string{"stream.uris[0]: amqp://relay:xxxxx@h:5672/ is not a rabbitmq-stream://"}},
		{"unparseable", func(c *Config) { c.URIs = []string{"rabbitmq-stream://relay:" + pw + "@h:55x52/\x7f"} },
			[]string{"stream.uris[0]: not a URL"}},
		{"two segments", func(c *Config) { c.URIs = []string{"rabbitmq-stream://h:5552/a/b"} }, []string{"virtual host, one segment"}},
		{"names", func(c *Config) { c.Stream, c.ProducerName = "", strings.Repeat("p", 256) },
			[]string{"stream.name: required", "stream.producer_name: 256 bytes"}},
		{"numbers", func(c *Config) {
			c.Window, c.ConfirmTimeout, c.MaxFrameBytes, c.MaxLengthBytes, c.MaxAge = maxWindow+1, -time.Second, 100, -1, -time.Hour
		}, []string{"stream.window", "stream.confirm_timeout", "stream.max_frame_bytes", "stream.max_length_bytes", "stream.max_age"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok()
			c.edit(&cfg)
			cfg.Defaults()
			err := cfg.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v\nwant %q in it", err, w)
				}
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("Validate shows the password: %v", err)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	var c Config
	c.Defaults()
	if c.Window != 1000 || c.ConfirmTimeout != 30*time.Second || c.ConnectTimeout != 10*time.Second || c.MaxFrameBytes != 1<<20 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestScrub(t *testing.T) {
	secrets := passwords([]string{"rabbitmq-stream://u:p%40ss%2Fw0rd@h:5552/", "rabbitmq-stream://h:5552/"})
	inner := errors.New(`parse "rabbitmq-stream://u:p@ss/w0rd@h": bad; again p%40ss%2Fw0rd`)
	err := scrub(inner, secrets)
	if strings.Contains(err.Error(), "p@ss/w0rd") || strings.Contains(err.Error(), "p%40ss%2Fw0rd") {
		t.Fatalf("scrub left the password: %v", err)
	}
	if !errors.Is(err, inner) {
		t.Fatal("scrub hides the error inside from errors.Is")
	}
	if got := publisher.Redact("rabbitmq-stream://u:secret@h:5552/v"); got != "rabbitmq-stream://u:xxxxx@h:5552/v" {
		t.Fatalf("publisher.Redact = %s", got)
	}
}

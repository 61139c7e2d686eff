package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const oneTable = "tables:\n  - {preset: producer-message, schema: shop}\n"

// broker.urls names the nodes of one cluster; broker.password_file puts
// its password into each; Nodes and FirstURL read either form.
func TestBrokerURLs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, servers+`broker:
  urls: ["amqp://relay@mq-1:5672/", "amqp://relay@mq-2:5672/", "amqp://mq-3:5672/"]
  password_file: "`+file+`"
`+oneTable)
	want := []string{"amqp://relay:s3cret@mq-1:5672/", "amqp://relay:s3cret@mq-2:5672/", "amqp://guest:s3cret@mq-3:5672/"}
	if !slices.Equal(c.Broker.Nodes(), want) || c.Broker.FirstURL() != want[0] || c.Broker.URL != "" {
		t.Errorf("nodes %v (first %q, url %q), want %v", c.Broker.Nodes(), c.Broker.FirstURL(), c.Broker.URL, want)
	}
	wantStream := []string{"rabbitmq-stream://relay:s3cret@mq-1:5552/", "rabbitmq-stream://relay:s3cret@mq-2:5552/", "rabbitmq-stream://guest:s3cret@mq-3:5552/"}
	if uris, err := c.Broker.StreamURIs(); err != nil || !slices.Equal(uris, wantStream) {
		t.Errorf("stream URIs %q, %v: want each node's host on 5552, %q", uris, err, wantStream)
	}
	one := mustParse(t, base+oneTable)
	if !slices.Equal(one.Broker.Nodes(), []string{"amqp://guest:guest@127.0.0.1:5672/"}) {
		t.Errorf("broker.url alone: nodes %v", one.Broker.Nodes())
	}
}

// broker.tls needs every node to be amqps://.
func TestBrokerURLsTLS(t *testing.T) {
	b := Broker{URLs: []string{"amqps://mq-1:5671/", "amqps://mq-2:5671/"}, TLS: TLS{Enabled: true}}
	if _, err := b.TLSConfig(); err != nil {
		t.Errorf("amqps nodes with TLS: %v", err)
	}
	b.URLs[1] = "amqp://mq-2:5672/"
	if _, err := b.TLSConfig(); err == nil || !strings.Contains(err.Error(), "broker.tls") {
		t.Errorf("one amqp:// node with TLS: %v", err)
	}
}

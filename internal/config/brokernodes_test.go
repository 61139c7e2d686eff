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

// Each bad broker.url/urls value is named by its key and index, and no
// error shows a password.
func TestBrokerURLsRefused(t *testing.T) {
	for yaml, want := range map[string]string{
		`broker: {url: "amqp://mq-1/", urls: ["amqp://mq-2/"]}`: "broker.urls: set broker.url (one node) or broker.urls (the nodes of one cluster), not both",
		`broker: {window: 8}`: "broker.url: required (or broker.urls",
		`broker: {urls: []}`:  "broker.url: required (or broker.urls",
		`broker: {urls: ["amqp://relay:s3cret@mq-1/", "http://relay:s3cret@mq-2/"]}`: "broker.urls[1]: must start with amqp:// or amqps://",
		`broker: {urls: ["amqp://relay:s3cret@mq-1/", "amqp:///vh"]}`:                "broker.urls[1]: has no host",
		`broker: {urls: ["amqp://mq-1/", "amqp://mq-2/", "amqp://mq-1/"]}`:           "broker.urls[2]: the same URL as broker.urls[0]",
		`broker: {urls: ["amqps://mq-1/", "amqp://mq-2/"]}`:                          "broker.urls[1]: amqp:// where broker.urls[0] is amqps://",
	} {
		_, err := parse(t, servers+yaml+"\n"+oneTable, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", yaml, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the password: %v", yaml, err)
		}
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

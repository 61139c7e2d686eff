package config

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

func TestMetricsHTTPConfig(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, c := range []struct {
		addr     *string
		want     string
		explicit bool
	}{
		{nil, DefaultHTTPAddr, false},
		{str("0.0.0.0:9464"), "0.0.0.0:9464", true},
		{str("off"), "", true},
		{str(""), "", true},
	} {
		got, explicit := HTTP{Addr: c.addr}.ListenAddr()
		if got != c.want || explicit != c.explicit {
			t.Errorf("ListenAddr(%v) = %q %v, want %q %v", c.addr, got, explicit, c.want, c.explicit)
		}
	}
	var h HTTP
	h.defaults()
	if want := (HTTP{ReadyMaxLag: 30 * time.Second, BacklogInterval: 15 * time.Second, RetryRatioInterval: time.Minute,
		QueueInterval: 15 * time.Second, VHost: "/"}); !reflect.DeepEqual(h, want) {
		t.Errorf("defaults: %+v, want %+v", h, want)
	}
	for _, c := range []struct{ broker, want string }{
		{"amqp://relay:pw@rabbit:5672/", "http://relay:pw@rabbit:15672"},
		{"amqps://relay:pw@rabbit:5671/prod", "https://relay:pw@rabbit:15672"},
		{"amqp://rabbit/", "http://guest:guest@rabbit:15672"},
	} {
		if got, err := h.Management(c.broker); err != nil || got != c.want {
			t.Errorf("Management(%s) = %q, %v; want %q", c.broker, got, err, c.want)
		}
	}
	if got, _ := (HTTP{ManagementURL: "http://m:1"}).Management("amqp://x/"); got != "http://m:1" {
		t.Errorf("explicit management URL ignored: %s", got)
	}

	bad := HTTP{Addr: str("9464"), ReadyMaxLag: -time.Second, ManagementURL: "ftp://u:SECRET@h", Queues: []string{" "}}
	err := bad.Validate()
	for _, want := range []string{"http.addr", "http.ready_max_lag", "http.management_url", "http.queues[0]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want a problem naming %s", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "SECRET") {
		t.Errorf("validation error carries the password: %v", err)
	}

	cfg, err := Parse([]byte(`
source: {host: r, user: relay}
primary: {host: p, user: relay}
broker: {url: "amqp://guest:guest@rabbit:5672/"}
http: {addr: "127.0.0.1:0", ready_max_lag: 10s, backlog_interval: 500ms, queues: [orders]}
tables:
  - {preset: producer-message, schema: shop}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if a, explicit := cfg.HTTP.ListenAddr(); a != "127.0.0.1:0" || !explicit || cfg.HTTP.ReadyMaxLag != 10*time.Second ||
		cfg.HTTP.BacklogInterval != 500*time.Millisecond || cfg.HTTP.QueueInterval != 15*time.Second || len(cfg.HTTP.Queues) != 1 {
		t.Errorf("parsed http section: %+v", cfg.HTTP)
	}
}

// Secrets reach the drivers but never an error or a printed URL/DSN.
func TestSecretsRedactedInURLsDSNsAndErrors(t *testing.T) {
	const pw = "Sup3r-s3cret/pw@x"
	for _, raw := range []string{
		"amqp://relay:Sup3r-s3cret%2Fpw%40x@rabbit:5672/",
		"amqps://relay:Sup3r-s3cret%2Fpw%40x@rabbit:5671/vhost",
		"http://monitor:Sup3r-s3cret%2Fpw%40x@rabbit:15672",
	} {
		red := publisher.Redact(raw)
		if strings.Contains(red, "s3cret") || !strings.Contains(red, "relay") && !strings.Contains(red, "monitor") {
			t.Errorf("Redact(%s) = %s", raw, red)
		}
		err := publisher.Scrub(errors.New("dial: cannot reach "+raw+" with password Sup3r-s3cret/pw@x"), raw)
		if strings.Contains(err.Error(), pw) {
			t.Errorf("Scrub left the password: %v", err)
		}
	}
	if got := publisher.Redact("amqp://%zz"); strings.Contains(got, "%zz") {
		t.Errorf("unparseable URL printed as is: %s", got)
	}

	m := MySQL{Host: "127.0.0.1", Port: 1, User: "relay", Password: pw}
	if strings.Contains(m.Redacted(), "s3cret") {
		t.Errorf("Redacted() = %s", m.Redacted())
	}
	// The driver's own errors (a refused connection) do not echo the DSN.
	dc, err := m.DriverConfig("source")
	if err != nil {
		t.Fatal(err)
	}
	dsn := dc.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("ping error: %v", err)
	}

	// Config errors name the field or the variable, never a value (a bad
	// broker.url is the publisher's: cmd/binlog-relay's
	// TestConfigErrorsNeverEchoASecret).
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"RELAY_PW": pw}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	_, err = Parse([]byte(`source: {host: r, user: relay, password: "${UNSET_PW}"}`), lookup)
	if err == nil || !strings.Contains(err.Error(), "UNSET_PW") {
		t.Errorf("unset variable: %v", err)
	}
	cfg, err := Parse([]byte(`
source: {host: r, user: relay, password: "${RELAY_PW}"}
primary: {host: p, user: relay, password_file: "`+file+`"}
broker: {url: "amqp://relay@rabbit:5672/", password_file: "`+file+`"}
tables:
  - {preset: producer-message, schema: shop}
`), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.Password != pw || cfg.Primary.Password != pw || !strings.Contains(cfg.Broker.URL, "s3cret") {
		t.Errorf("secrets not resolved: source %v primary %v broker %v", cfg.Source.Password == pw, cfg.Primary.Password == pw, cfg.Broker.URL != "")
	}
	if red := publisher.Redact(cfg.Broker.URL); strings.Contains(red, "s3cret") {
		t.Errorf("broker URL from password_file printed with it: %s", red)
	}
}

// metrics.max_label_values defaults to 100, takes a value, and refuses one
// under 1 with the key named.
func TestMetricsMaxLabelValuesConfig(t *testing.T) {
	base := `
source: {host: r, user: relay}
primary: {host: p, user: relay}
broker: {url: "amqp://guest:guest@rabbit:5672/"}
tables:
  - {preset: producer-message, schema: shop}
`
	none := func(string) (string, bool) { return "", false }
	cfg, err := Parse([]byte(base), none)
	if err != nil {
		t.Fatal(err)
	}
	// 0 is the metrics' own default, 100 (internal/metrics' tests).
	if cfg.Metrics.MaxLabelValues != 0 {
		t.Errorf("unset max_label_values = %d, want 0 (the metrics' default)", cfg.Metrics.MaxLabelValues)
	}
	cfg, err = Parse([]byte(base+"metrics: {max_label_values: 20}\n"), none)
	if err != nil || cfg.Metrics.MaxLabelValues != 20 {
		t.Errorf("max_label_values: 20 parsed as %v, %v", cfg.Metrics.MaxLabelValues, err)
	}
	_, err = Parse([]byte(base+"metrics: {max_label_values: -1}\n"), none)
	if err == nil || !strings.Contains(err.Error(), "metrics.max_label_values") {
		t.Errorf("max_label_values: -1 gave %v, want an error naming metrics.max_label_values", err)
	}
	cfg, err = Parse([]byte(base+"metrics: {max_table_series: 250}\n"), none)
	if err != nil || cfg.Metrics.MaxTableSeries != 250 {
		t.Errorf("max_table_series: 250 parsed as %v, %v", cfg.Metrics.MaxTableSeries, err)
	}
	_, err = Parse([]byte(base+"metrics: {max_table_series: -5}\n"), none)
	if err == nil || !strings.Contains(err.Error(), "metrics.max_table_series") {
		t.Errorf("max_table_series: -5 gave %v, want an error naming metrics.max_table_series", err)
	}
}

// The console's keys: a token needs the console, is long enough and comes
// from one place; its file is read like a password file; no error quotes it.
func TestConsoleConfig(t *testing.T) {
	base := "source: {host: r, user: relay}\nprimary: {host: p, user: relay}\nbroker: {url: \"amqp://g:g@rabbit:5672/\"}\ntables:\n  - {preset: producer-message, schema: shop}\n"
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("file-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := func(string) (string, bool) { return "", false }
	for _, c := range []struct{ http, want string }{
		{`{console: true, console_token: "short-S3CRET"}`, "http.console_token: shorter than 16"},
		{`{console_token: "long-enough-token-S3CRET"}`, "http.console_token: set http.console: true"},
		{`{console: true, console_token: "long-enough-token-S3CRET", console_token_file: "` + token + `"}`, "http.console_token_file: set either"},
		{`{addr: "off", console: true}`, "http.console: needs the HTTP server"},
		{`{console: true, console_token_file: "/nonexistent/token"}`, "http.console_token_file: reading"},
	} {
		_, err := Parse([]byte(base+"http: "+c.http+"\n"), none)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.http, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "S3CRET") {
			t.Errorf("%s: the error quotes the token: %v", c.http, err)
		}
	}
	cfg, err := Parse([]byte(base+`http: {console: true, console_token_file: "`+token+`", console_payloads: true}`+"\n"), none)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.HTTP.Console || cfg.HTTP.ConsoleToken != "file-token-0123456789abcdef" || !cfg.HTTP.ConsolePayloads {
		t.Errorf("parsed: console %v, token from the file %v, payloads %v", cfg.HTTP.Console, cfg.HTTP.ConsoleToken == "file-token-0123456789abcdef", cfg.HTTP.ConsolePayloads)
	}
}

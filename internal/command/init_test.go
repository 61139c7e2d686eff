package command

import (
	"strings"
	"testing"
)

// A broker URL keeps everything but its password, which becomes the
// variable the config reads; a URL with a user and no password gets the
// variable too (the user has one to set), one without a user stays as it is.
func TestInitBrokerURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"amqp://relay:S3cr3t@mq.internal:5672/orders", "amqp://relay:${RELAY_BROKER_PASSWORD}@mq.internal:5672/orders"},
		{"amqps://relay@mq.internal:5671/", "amqps://relay:${RELAY_BROKER_PASSWORD}@mq.internal:5671/"},
		{"amqp://mq.internal:5672/", "amqp://mq.internal:5672/"},
		{"amqp://r%40lay:p%3Aw@mq/", "amqp://r%40lay:${RELAY_BROKER_PASSWORD}@mq/"},
	} {
		got, _, err := brokerURL(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.in, got, err, tc.want)
		}
	}
	if _, _, err := brokerURL("redis://S3cr3t@cache:6379"); err == nil || strings.Contains(err.Error(), "S3cr3t") {
		t.Errorf("not amqp: %v", err)
	}
}

// A DSN is go-sql-driver's or a mysql:// URL; port 3306 by default.
func TestInitServerDSN(t *testing.T) {
	for in, want := range map[string]string{
		"relay:pw@tcp(10.0.0.12:3307)/":    "relay pw 10.0.0.12:3307 ",
		"relay@tcp(db)/shop?tls=true":      "relay  db:3306 true",
		"mysql://relay:pw@10.0.0.12/shop":  "relay pw 10.0.0.12:3306 ",
		"mysql://relay@[::1]:3308/?tls=ca": "relay  [::1]:3308 ca",
	} {
		c, err := ParseServerDSN("--source", in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := c.User + " " + c.Passwd + " " + c.Addr + " " + c.TLSConfig; got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
	for _, bad := range []string{"10.0.0.12:3306", "relay:pw@unix(/tmp/s)/", "mysql://10.0.0.12/", "@tcp(h)/"} {
		if _, err := ParseServerDSN("--source", bad); err == nil || strings.Contains(err.Error(), "pw") {
			t.Errorf("%s: %v, want an error that shows nothing of it", bad, err)
		}
	}
}

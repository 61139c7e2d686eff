package testenv

import (
	"net"
	"net/url"
	"strconv"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
)

// Addr is a DSN's host:port.
func Addr(dsn string) string {
	h, p := HostPort(dsn)
	return net.JoinHostPort(h, strconv.Itoa(p))
}

// AMQPAddr is the stack's RabbitMQ host:port.
func AMQPAddr(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(AMQPURL)
	if err != nil || u.Host == "" {
		t.Fatalf("RELAY_TEST_AMQP_URL: %v", err)
	}
	return u.Host
}

// Proxy starts a fault proxy (internal/faultproxy) in front of the server
// at addr, closed when the test ends.
func Proxy(t testing.TB, addr string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Listen(addr)
	if err != nil {
		t.Fatalf("proxy to %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// closedPorts are n loopback ports nothing listens on: ones the kernel
// just handed out and took back, held together so they differ.
func closedPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// fakeRedis is a Redis that holds no checkpoint, so a test has one that
// answers whether or not a real one runs: GET is nil, PING and AUTH are
// fine, anything else (HELLO, CLIENT SETINFO) is refused, which go-redis
// takes for an older server.
func fakeRedis(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveRESP(c)
		}
	}()
	return l.Addr().String()
}

func serveRESP(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readRESPCommand(r)
		if err != nil || len(args) == 0 {
			return
		}
		reply := "-ERR unknown command\r\n"
		switch strings.ToUpper(args[0]) {
		case "GET":
			reply = "$-1\r\n"
		case "PING":
			reply = "+PONG\r\n"
		case "AUTH", "SELECT":
			reply = "+OK\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readRESPCommand reads one command: an array of bulk strings.
func readRESPCommand(r *bufio.Reader) ([]string, error) {
	header := func(prefix byte) (int, error) {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if len(line) < 3 || line[0] != prefix {
			return 0, fmt.Errorf("unexpected %q", line)
		}
		return strconv.Atoi(strings.TrimRight(line[1:], "\r\n"))
	}
	n, err := header('*')
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		size, err := header('$')
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// status exits 1 when a server it needs does not answer, with a line on
// stderr naming each one (and none naming a server that answered), and
// prints no password. With flavor auto and the source down the primary is
// not asked for its position, with mariadb it is: both ways it is
// reported.
func TestStatusFailsWhenAServerIsUnreachable(t *testing.T) {
	p := closedPorts(t, 3)
	source, primary := fmt.Sprintf("127.0.0.1:%d", p[0]), fmt.Sprintf("127.0.0.1:%d", p[1])
	downRedis, upRedis := fmt.Sprintf("127.0.0.1:%d", p[2]), fakeRedis(t)
	line := func(server, addr string) string {
		return fmt.Sprintf("binlog-relay: status: %s %s could not be reached", server, addr)
	}
	for _, c := range []struct {
		name, flavor, redis string
		want, notWant       []string
	}{
		{"nothing answers", "auto", downRedis, []string{line("redis", downRedis), line("source", source), line("primary", primary)}, nil},
		// Issue 26: status exited 0 when only Redis answered.
		{"only redis answers", "mariadb", upRedis, []string{line("source", source), line("primary", primary)}, []string{"redis"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := fmt.Sprintf(`source: {host: 127.0.0.1, port: %d, user: relay, password: %s, flavor: %s}
primary: {host: 127.0.0.1, port: %d, user: relay, password: %s}
broker: {url: "amqp://relay:%s@%s/"}
redis: {addr: %q, password: %s}
http: {addr: "off"}
tables:
  - {preset: producer-message, schema: shop}
`, p[0], secret, c.flavor, p[1], secret, secret, source, c.redis, secret)
			path := filepath.Join(t.TempDir(), "relay.yaml")
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out := runCaptured(t, "status", "--config", path)
			if code != 1 {
				t.Errorf("exit %d, want 1:\n%s", code, out)
			}
			for _, want := range append(c.want, "table        shop.producer_message: not read (the source is unreachable)") {
				if !strings.Contains(out, want) {
					t.Errorf("the output lacks %q:\n%s", want, out)
				}
			}
			for _, l := range strings.Split(out, "\n") {
				for _, bad := range c.notWant {
					if strings.HasPrefix(l, "binlog-relay: status:") && strings.Contains(l, bad) {
						t.Errorf("a server that answered is reported: %s", l)
					}
				}
			}
			if leaked(out) {
				t.Errorf("status printed the password:\n%s", out)
			}
		})
	}
}

package binlog_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) (string, uint16) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	_ = l.Close()
	return "127.0.0.1", uint16(addr.Port)
}

// runUntil runs a reader until want PasswordFunc calls were made.
func runUntil(t *testing.T, cfg binlog.Config, calls func() int, want int) string {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	r, err := binlog.New(cfg, nil, binlog.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, binlog.Position{Flavor: binlog.FlavorMySQL, File: "binlog.000001", Pos: 4}, make(chan binlog.Event, 1))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for calls() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if calls() < want {
		t.Fatalf("PasswordFunc called %d times, want at least %d", calls(), want)
	}
	return logs.String()
}

// Each connection the reader opens asks PasswordFunc for a password for
// the server it dials, so an expiring token is never reused; the password
// is in no log line.
func TestPasswordFuncIsAskedAtEachConnect(t *testing.T) {
	host, port := closedAddr(t)
	var mu sync.Mutex
	var addrs, tokens []string
	cfg := binlog.Config{Host: host, Port: port, User: "relay", Flavor: binlog.FlavorMySQL,
		ReconnectMin: time.Millisecond, ReconnectMax: 5 * time.Millisecond,
		PasswordFunc: func(_ context.Context, addr string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			addrs = append(addrs, addr)
			tokens = append(tokens, fmt.Sprintf("iam-token-%d", len(tokens)+1))
			return tokens[len(tokens)-1], nil
		}}
	logs := runUntil(t, cfg, func() int { mu.Lock(); defer mu.Unlock(); return len(tokens) }, 3)
	mu.Lock()
	defer mu.Unlock()
	for _, a := range addrs {
		if a != net.JoinHostPort(host, fmt.Sprint(port)) {
			t.Fatalf("password asked for %q, the reader dials %s:%d", a, host, port)
		}
	}
	if !strings.Contains(logs, "binlog stream lost, reconnecting") {
		t.Fatalf("no reconnect logged:\n%s", logs)
	}
	if strings.Contains(logs, "iam-token-") {
		t.Fatalf("a password reached the log:\n%s", logs)
	}
}

// A PasswordFunc that fails fails that connection only: the reader logs
// why and tries again, and asks again.
func TestPasswordFuncErrorIsRetried(t *testing.T) {
	host, port := closedAddr(t)
	var mu sync.Mutex
	n := 0
	cfg := binlog.Config{Host: host, Port: port, User: "relay", Flavor: binlog.FlavorMySQL,
		ReconnectMin: time.Millisecond, ReconnectMax: 5 * time.Millisecond,
		PasswordFunc: func(context.Context, string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			n++
			return "", errors.New("no AWS credentials")
		}}
	logs := runUntil(t, cfg, func() int { mu.Lock(); defer mu.Unlock(); return n }, 2)
	if !strings.Contains(logs, "getting the password for") || !strings.Contains(logs, "no AWS credentials") {
		t.Fatalf("the failure is not logged:\n%s", logs)
	}
}

// Password and PasswordFunc are one or the other.
func TestPasswordAndPasswordFuncExclusive(t *testing.T) {
	_, err := binlog.New(binlog.Config{Host: "x", Port: 1, User: "u", Flavor: binlog.FlavorMySQL, Password: "s3cret-pw",
		PasswordFunc: func(context.Context, string) (string, error) { return "", nil }}, nil)
	if err == nil || !strings.Contains(err.Error(), "Config.PasswordFunc: set Password or PasswordFunc, not both") || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("error: %v", err)
	}
}

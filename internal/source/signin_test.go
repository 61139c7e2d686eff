package source

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/rdsauth"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// fakeRDS is a MySQL server that signs users in the way RDS's
// AWSAuthenticationPlugin does: it offers mysql_native_password, then asks
// for the password in clear text (mysql_clear_password), which it takes
// only over TLS, and accepts a token only if its signer issued it and no
// connection used it before. Its signer stands in for the AWS SDK's.
type fakeRDS struct {
	addr string
	pki  *testenv.PKI

	mu       sync.Mutex
	n        int
	issued   map[string]bool // token -> used
	signedAt []string        // the endpoint of each token
	accepted []string
	refuse   bool // refuse the next sign-in
}

func newFakeRDS(t *testing.T) *fakeRDS {
	t.Helper()
	f := &fakeRDS{pki: testenv.NewPKI(t, "rds.test"), issued: map[string]bool{}}
	cert, err := tls.LoadX509KeyPair(f.pki.CertFile, f.pki.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.NewServerWithAuth("8.0.39", gomysql.DEFAULT_COLLATION_ID, gomysql.AUTH_NATIVE_PASSWORD, nil,
		&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, f)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	f.addr = l.Addr().String()
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				c, err := srv.NewCustomizedConn(nc, f, quietHandler{})
				if err != nil {
					return
				}
				for c.HandleCommand() == nil {
				}
			}()
		}
	}()
	// The relay's token signer, with the fake's signer instead of the SDK's.
	old := newTokens
	newTokens = func(_ context.Context, region, user string) (binlog.PasswordFunc, error) {
		creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret-key"}, nil
		})
		return rdsauth.NewWith(region, user, creds, f.sign).Password, nil
	}
	t.Cleanup(func() { newTokens = old })
	return f
}

func (f *fakeRDS) sign(_ context.Context, endpoint, region, user string, _ aws.CredentialsProvider) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	tok := fmt.Sprintf("%s/?Action=connect&DBUser=%s&X-Amz-Region=%s&X-Amz-Signature=fake%04d", endpoint, user, region, f.n)
	f.issued[tok] = false
	f.signedAt = append(f.signedAt, endpoint)
	return tok, nil
}

// GetCredential is server.AuthenticationHandler: "relay" signs in with
// mysql_clear_password (the password is never compared here: Authenticate
// does).
func (f *fakeRDS) GetCredential(user string) (server.Credential, bool, error) {
	return server.Credential{Passwords: []string{"-"}, AuthPluginName: gomysql.AUTH_CLEAR_PASSWORD}, user == "relay", nil
}
func (f *fakeRDS) OnAuthSuccess(*server.Conn) error  { return nil }
func (f *fakeRDS) OnAuthFailure(*server.Conn, error) {}

// Validate and Authenticate are server.AuthenticationProvider.
func (f *fakeRDS) Validate(plugin string) bool {
	return plugin == gomysql.AUTH_NATIVE_PASSWORD || plugin == gomysql.AUTH_CLEAR_PASSWORD
}

func (f *fakeRDS) Authenticate(c *server.Conn, plugin string, data []byte) error {
	if plugin != gomysql.AUTH_CLEAR_PASSWORD {
		return server.ErrAccessDenied
	}
	if _, isTLS := c.Conn.Conn.(*tls.Conn); !isTLS {
		return errors.New("IAM sign-in needs TLS")
	}
	token := strings.TrimSuffix(string(data), "\x00")
	f.mu.Lock()
	defer f.mu.Unlock()
	used, known := f.issued[token]
	if !known || used || f.refuse {
		f.refuse = false
		return server.ErrAccessDenied
	}
	f.issued[token] = true
	f.accepted = append(f.accepted, token)
	return nil
}

func (f *fakeRDS) signIns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.accepted)
}

// section is a config section signing in to the fake with aws_iam.
func (f *fakeRDS) section(t *testing.T) config.MySQL {
	t.Helper()
	host, port, _ := net.SplitHostPort(f.addr)
	var p int
	fmt.Sscan(port, &p)
	return config.MySQL{Host: host, Port: p, User: "relay", AWSIAM: &config.AWSIAM{Region: "eu-west-1"},
		TLS: config.TLS{Enabled: true, CAFile: f.pki.CAFile, ServerName: "rds.test"}}
}

// quietHandler answers no query (server.EmptyHandler logs each one).
type quietHandler struct{ server.EmptyHandler }

func (quietHandler) HandleQuery(string) (*gomysql.Result, error) {
	return nil, errors.New("not supported by the fake")
}

// Each new database/sql connection signs in with a token signed for it,
// never one used before, over TLS with mysql_clear_password; a refused
// sign-in's error holds no token.
func TestIAMTokenPerSQLConnection(t *testing.T) {
	f := newFakeRDS(t)
	db, err := OpenDB(f.section(t), "source")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxIdleConns(0) // every Ping dials anew
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		if err := db.PingContext(ctx); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
	}
	if n := f.signIns(); n != 3 {
		t.Fatalf("%d sign-ins, want 3", n)
	}
	for _, at := range f.signedAt {
		if at != f.addr {
			t.Fatalf("token signed for %s, the connection went to %s", at, f.addr)
		}
	}
	f.mu.Lock()
	f.refuse = true
	f.mu.Unlock()
	err = db.PingContext(ctx)
	if err == nil {
		t.Fatal("a refused sign-in succeeded")
	}
	if strings.Contains(err.Error(), "X-Amz-Signature") || strings.Contains(err.Error(), "secret-key") {
		t.Fatalf("the error shows the token: %v", err)
	}
}

// The binlog stream signs in with a fresh token at every (re)connect,
// through go-mysql's switch to mysql_clear_password; the reader's log
// holds no token.
func TestIAMTokenPerBinlogConnection(t *testing.T) {
	f := newFakeRDS(t)
	m := f.section(t)
	password, tokens, err := BinlogPassword(context.Background(), m)
	if err != nil || tokens == nil || password != "" {
		t.Fatalf("BinlogPassword: %q %v %v", password, tokens != nil, err)
	}
	stls, err := m.TLSConfig("source")
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	r, err := binlog.New(binlog.Config{Host: m.Host, Port: uint16(m.Port), User: m.User, PasswordFunc: tokens, TLS: stls,
		Flavor: binlog.FlavorMySQL, ReconnectMin: time.Millisecond, ReconnectMax: 5 * time.Millisecond}, nil,
		binlog.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, binlog.Position{Flavor: binlog.FlavorMySQL, File: "binlog.000001", Pos: 4}, make(chan binlog.Event, 1))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for f.signIns() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := f.signIns(); n < 3 {
		t.Fatalf("%d sign-ins of the binlog stream, want 3 (each reconnect with a new token); log:\n%s", n, logs.String())
	}
	if out := logs.String(); strings.Contains(out, "X-Amz-Signature") || strings.Contains(out, "secret-key") {
		t.Fatalf("a token reached the log:\n%s", out)
	}
}

// Without aws_iam nothing is signed: the section's password is used.
func TestPasswordWithoutIAM(t *testing.T) {
	pw, tokens, err := BinlogPassword(context.Background(), config.MySQL{User: "relay", Password: "pw"})
	if err != nil || tokens != nil || pw != "pw" {
		t.Fatalf("%q %v %v", pw, tokens != nil, err)
	}
}

package command

import (
	"bytes"
	"context"
	"crypto/tls"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func TestServerError(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	cases := []struct {
		err  error
		net  bool
		want string
	}{
		{refused, true, "redis 127.0.0.1:6379 could not be reached: dial tcp: connect: connection refused"},
		{fmt.Errorf("loading the checkpoint: %w", refused), true,
			"redis 127.0.0.1:6379 could not be reached: loading the checkpoint: dial tcp: connect: connection refused"},
		{driver.ErrBadConn, true, "redis 127.0.0.1:6379 could not be reached: driver: bad connection"},
		{mysql.ErrInvalidConn, true, "redis 127.0.0.1:6379 could not be reached: invalid connection"},
		{&mysql.MySQLError{Number: 1045, Message: "Access denied for user 'relay'"}, false,
			"redis 127.0.0.1:6379 answered with an error: Error 1045: Access denied for user 'relay'"},
		{errors.New("NOAUTH Authentication required."), false,
			"redis 127.0.0.1:6379 answered with an error: NOAUTH Authentication required."},
	}
	for _, c := range cases {
		if got := isNetError(c.err); got != c.net {
			t.Errorf("isNetError(%v) = %v, want %v", c.err, got, c.net)
		}
		err := serverError("redis", "127.0.0.1:6379", c.err)
		if err.Error() != c.want || !errors.Is(err, c.err) {
			t.Errorf("serverError(%v) = %q, want %q wrapping it", c.err, err, c.want)
		}
	}
}

// failConnector is a server whose every dial fails with err.
type failConnector struct{ err error }

func (c failConnector) Connect(context.Context) (driver.Conn, error) { return nil, c.err }
func (c failConnector) Driver() driver.Driver                        { return c }
func (c failConnector) Open(string) (driver.Conn, error)             { return nil, c.err }

// failStore is a checkpoint store that cannot be read.
type failStore struct{ err error }

func (s failStore) Load(context.Context) (checkpoint.Checkpoint, error) {
	return checkpoint.Checkpoint{}, s.err
}
func (s failStore) Save(context.Context, checkpoint.Checkpoint) error { return s.err }

// With Redis, the source and the primary all failing, status still prints
// the broker's nodes and the relay's connections, skips what needs the
// source or Redis, and fails naming each of the three.
func TestStatusNamesEachServerDown(t *testing.T) {
	mgmt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "mon" || p != "s3cret" || r.URL.Path != "/api/connections" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `[{"node":"rabbit@mq-2","port":5673,"client_properties":{"connection_name":"t-sweeper"}},
			{"node":"rabbit@mq-1","port":5672,"client_properties":{"connection_name":"t"}},
			{"node":"rabbit@mq-1","port":5672,"client_properties":{"connection_name":"other"}},
			{"node":"rabbit@mq-1","port":5672,"client_properties":{"connection_name":"tx"}}]`)
	}))
	defer mgmt.Close()
	cfg := &config.Config{
		Name:       "t",
		Source:     config.MySQL{Host: "replica.test", Port: 3306, User: "relay"},
		Primary:    config.MySQL{Host: "primary.test", Port: 3306, User: "relay"},
		Redis:      config.Redis{Addr: "redis.test:6379"},
		Checkpoint: config.Checkpoint{Key: "binlog-relay:t:checkpoint"},
		Broker:     config.Broker{URLs: []string{"amqp://relay:s3cret@mq-1:5672/", "amqp://relay:s3cret@mq-2:5673/"}},
		HTTP:       config.HTTP{ManagementURL: strings.Replace(mgmt.URL, "http://", "http://mon:s3cret@", 1)},
		Reconcile:  config.Reconcile{Consumers: []config.ReconcileConsumer{{Name: "billing"}}},
		Tables:     []*outbox.Table{table("shop", "outbox", true), table("shop", "events", false)},
	}
	src, err := source.New(cfg.Source, zap.NewNop(), func(config.MySQL, string) (driver.Connector, error) {
		return failConnector{driver.ErrBadConn}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	primary := sql.OpenDB(failConnector{&mysql.MySQLError{Number: 1045, Message: "Access denied for user 'relay'"}})
	defer primary.Close()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // not asked: the checkpoint's error says Redis is unreachable
	defer rc.Close()
	e := Env{
		Cfg: cfg, Log: zap.NewNop(), Source: src, Primary: primary, Redis: rc,
		Store: failStore{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}},
		ReplicaStatus: func(_ context.Context, w io.Writer, _ checkpoint.Checkpoint, haveCP bool) (bool, error) {
			fmt.Fprintf(w, "replica      (have checkpoint %v)\n", haveCP)
			return false, nil
		},
		ProbeBroker: func(_ context.Context, _ config.Broker, _ *tls.Config, timeout time.Duration) []preflight.NodeProbe {
			if timeout != 3*time.Second {
				t.Errorf("broker probed within %s, want 3s", timeout)
			}
			return []preflight.NodeProbe{{URL: "amqp://relay:xxxxx@mq-1:5672/", Version: "4.1.0", Cluster: "rabbit@mq-1"},
				{URL: "amqp://relay:xxxxx@mq-2:5673/", Err: errors.New("dial tcp: connection refused")}}
		},
	}
	var out bytes.Buffer
	err = Status(context.Background(), e, &out)
	want := `checkpoint   dial tcp: connect: connection refused
source       unreachable: source relay@replica.test:3306: reading the server's version: driver: bad connection
replica      (have checkpoint false)
primary      primary.test:3306: Error 1045: Access denied for user 'relay'
broker       amqp://relay:xxxxx@mq-1:5672/ (node 1 of 2) answers: RabbitMQ 4.1.0, cluster rabbit@mq-1
broker       amqp://relay:xxxxx@mq-2:5673/ (node 2 of 2) does not answer: dial tcp: connection refused
broker       connection t on node rabbit@mq-1 (port 5672), amqp://relay:xxxxx@mq-1:5672/
broker       connection t-sweeper on node rabbit@mq-2 (port 5673), amqp://relay:xxxxx@mq-2:5673/
table        shop.outbox: not read (the source is unreachable)
reconcile    not read (redis is unreachable)
`
	if out.String() != want {
		t.Errorf("status printed\n%s\nwant\n%s", out.String(), want)
	}
	wantErr := `redis redis.test:6379 could not be reached: dial tcp: connect: connection refused
source replica.test:3306 could not be reached: source relay@replica.test:3306: reading the server's version: driver: bad connection
primary primary.test:3306 answered with an error: Error 1045: Access denied for user 'relay'`
	if err == nil || err.Error() != wantErr {
		t.Errorf("status failed with\n%v\nwant\n%s", err, wantErr)
	}
	if strings.Contains(out.String()+fmt.Sprint(err), "s3cret") {
		t.Error("a password reached status's output")
	}
}

// What the management API does not say is one line; status goes on.
func TestStatusRelayConnectionsNotRead(t *testing.T) {
	mgmt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, _, _ := r.BasicAuth(); u == "mon" {
			io.WriteString(w, `[{"node":"rabbit@mq-1","port":5672,"client_properties":{"connection_name":"other"}}]`)
			return
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	defer mgmt.Close()
	host := strings.TrimPrefix(mgmt.URL, "http://")
	cases := []struct {
		mgmt, want string
	}{
		{"http://guest:s3cret@" + host, "broker       the nodes this relay's connections are on: not read (management API http://" +
			host + ": 401 Unauthorized); /readyz and binlog_relay_broker_node_info say\n"},
		{"http://[::1", "broker       the nodes this relay's connections are on: not read (http.management_url: not a URL); /readyz and binlog_relay_broker_node_info say\n"},
		{"http://mon:s3cret@" + host, "broker       no connection named t on the broker (the relay is not running, or connected too recently: the management API lists a connection once its first stats are in, within 5 s)\n"},
	}
	for _, c := range cases {
		e := Env{Cfg: &config.Config{Name: "t", Broker: config.Broker{URL: "amqp://relay:s3cret@mq-1:5672/"}, HTTP: config.HTTP{ManagementURL: c.mgmt}},
			ProbeBroker: func(context.Context, config.Broker, *tls.Config, time.Duration) []preflight.NodeProbe { return nil }}
		var out bytes.Buffer
		e.brokerStatus(context.Background(), &out)
		if out.String() != c.want {
			t.Errorf("printed %q, want %q", out.String(), c.want)
		}
	}
}

// nodeURL names the broker.urls entry a connection is on only when its port
// says which.
func TestNodeURL(t *testing.T) {
	b := config.Broker{URLs: []string{"amqp://relay:s3cret@mq-1:5672/", "amqp://relay:s3cret@mq-2:5672/", "amqp://relay:s3cret@mq-3:5673/"}}
	for port, want := range map[int]string{5673: ", amqp://relay:xxxxx@mq-3:5673/", 5672: "", 5674: ""} {
		if got := nodeURL(b, port); got != want {
			t.Errorf("nodeURL(%d) = %q, want %q", port, got, want)
		}
	}
}

package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"gopkg.in/yaml.v3"

	"github.com/binlog-relay/binlog-relay/examples/order-inventory/demo"
	"github.com/binlog-relay/binlog-relay/examples/order-inventory/inventory"
	"github.com/binlog-relay/binlog-relay/examples/order-inventory/order"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

// The Compose demo's pieces on the local stack (MariaDB stands in for MySQL 8.4): the
// definitions file imported into a vhost of its own, with its users renamed for the test
// and their password hashes kept; the init scripts the primary runs; the relay with the
// Compose config pointed at the stack; the inventory service's consumer; and the demo's
// one-shot, which must see every order received once.
func TestComposeDemoOnTheStack(t *testing.T) {
	testenv.Integration(t)
	c := loadCompose(t)
	vhost := testenv.UniqueName("compose_demo")
	users := importDefinitions(t, vhost)

	var ddl []string
	for _, v := range c.Services["mysql-primary"].Volumes {
		parts := strings.Split(v, ":")
		if strings.HasPrefix(parts[1], "/docker-entrypoint-initdb.d/") && !strings.Contains(parts[0], "primary-init") {
			ddl = append(ddl, strings.TrimPrefix(parts[0], "./")) // users are the stack's root
		}
	}
	db := testenv.NewDB(t, ddl...)

	relayURL := brokerURL(t, users, "relay", c.Services["relay"].Environment["RELAY_BROKER_PASSWORD"], vhost)
	shopURL := brokerURL(t, users, "shop", "shop", vhost)
	relaytest.StartRelay(t, stackRelayConfig(t, c, db.Name, relayURL))

	// The inventory service declares its topology as the definitions did: RabbitMQ
	// refuses a declaration that differs (406).
	conn, err := amqp.Dial(shopURL)
	if err != nil {
		t.Fatalf("the inventory service's user cannot log in: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := inventory.DeclareTopology(ch, order.Exchange, inventory.Queue); err != nil {
		t.Fatalf("the definitions differ from what the inventory service declares: %v", err)
	}
	consumer := relaytest.StartInbox(t, inbox.Config{URL: shopURL, Queue: inventory.Queue, ConsumerName: "inventory-service", Workers: 4},
		db.Primary, inventory.Deduct, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	defer func() { _ = consumer.Stop() }()

	var out bytes.Buffer
	err = demo.Run(context.Background(), db.Primary, demo.Options{Orders: 5, Exchange: order.Exchange,
		Consumer: "inventory-service", Wait: time.Minute, Poll: 100 * time.Millisecond}, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	if n := strings.Count(text, "\nreceived "); n != 5 || !strings.Contains(text, "all 5 orders received once and deducted") ||
		!strings.Contains(text, "outbox rows of these orders: SENT 5") {
		t.Errorf("demo output: %d orders received, want 5 received, SENT 5 and the closing line:\n%s", n, text)
	}
	if n := db.Count(t, "SELECT COUNT(*) FROM consumer_message WHERE status = 'SUCCESS'"); n != 5 {
		t.Errorf("inbox has %d SUCCESS rows, want 5", n)
	}
}

// importDefinitions creates vhost and imports the definitions file into it through the
// management API: users renamed (their password hashes kept), every vhost "/" replaced.
// It returns the renamed users by their names in the file; all is deleted at the end.
func importDefinitions(t *testing.T, vhost string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(testenv.RepoPath(definitionsFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string][]map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	renamed := map[string]string{}
	for _, u := range doc["users"] {
		name := u["name"].(string)
		renamed[name] = testenv.UniqueName("compose_" + name)
		u["name"] = renamed[name]
	}
	for _, p := range doc["permissions"] {
		p["user"] = renamed[p["user"].(string)]
	}
	for _, list := range doc {
		for _, item := range list {
			if item["vhost"] == "/" {
				item["vhost"] = vhost
			}
		}
	}
	doc["vhosts"] = []map[string]any{{"name": vhost}}
	management(t, http.MethodPut, "/api/vhosts/"+url.PathEscape(vhost), map[string]any{})
	t.Cleanup(func() { management(t, http.MethodDelete, "/api/vhosts/"+url.PathEscape(vhost), nil) })
	for _, name := range renamed {
		t.Cleanup(func() { management(t, http.MethodDelete, "/api/users/"+name, nil) })
	}
	management(t, http.MethodPost, "/api/definitions", doc)
	return renamed
}

func brokerURL(t *testing.T, users map[string]string, user, password, vhost string) string {
	t.Helper()
	stack, err := url.Parse(testenv.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	name, ok := users[user]
	if !ok {
		t.Fatalf("%s has no user %s", definitionsFile, user)
	}
	u := url.URL{Scheme: "amqp", User: url.UserPassword(name, password), Host: stack.Host, Path: "/" + vhost}
	return u.String()
}

// stackRelayConfig is deploy/docker/relay.yaml with the servers of the stack.
func stackRelayConfig(t *testing.T, c composeFile, db, brokerURL string) string {
	t.Helper()
	raw, err := os.ReadFile(testenv.RepoPath("deploy/docker/relay.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	ph, pp := testenv.HostPort(testenv.PrimaryDSN)
	cfg["name"] = testenv.UniqueName("compose_relay")
	cfg["source"] = map[string]any{"host": sh, "port": sp, "user": "root"}
	cfg["primary"] = map[string]any{"host": ph, "port": pp, "user": "root"}
	cfg["broker"] = map[string]any{"url": brokerURL}
	cfg["redis"] = map[string]any{"addr": testenv.RedisAddr}
	cfg["http"] = map[string]any{"addr": "off"}
	cfg["checkpoint"] = map[string]any{"interval": "200ms"}
	tables, _ := cfg["tables"].([]any)
	if len(tables) == 0 {
		t.Fatal("deploy/docker/relay.yaml has no tables")
	}
	for _, tb := range tables {
		tb.(map[string]any)["schema"] = db
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// management calls the RabbitMQ management API and fails the test on an error status.
func management(t *testing.T, method, path string, body any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	u, err := url.Parse(testenv.ManagementURL)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(testenv.ManagementURL, "/")+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	// The URL carries the credentials; the request must not print them.
	req.URL.User = nil
	pw, _ := u.User.Password()
	req.SetBasicAuth(u.User.Username(), pw)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("management API %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("management API %s %s: %s %s", method, path, resp.Status, msg)
	}
}

package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/examples/order-inventory/inventory"
	"github.com/binlog-relay/binlog-relay/examples/order-inventory/order"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

const definitionsFile = "deploy/docker/rabbitmq/definitions.json"

// definitions is RabbitMQ's definitions file, as far as the demo uses it.
type definitions struct {
	Users []struct {
		Name             string   `json:"name"`
		PasswordHash     string   `json:"password_hash"`
		HashingAlgorithm string   `json:"hashing_algorithm"`
		Tags             []string `json:"tags"`
	} `json:"users"`
	Vhosts []struct {
		Name string `json:"name"`
	} `json:"vhosts"`
	Permissions []struct {
		User      string `json:"user"`
		Vhost     string `json:"vhost"`
		Configure string `json:"configure"`
		Write     string `json:"write"`
		Read      string `json:"read"`
	} `json:"permissions"`
	Exchanges []struct {
		Name       string         `json:"name"`
		Vhost      string         `json:"vhost"`
		Type       string         `json:"type"`
		Durable    bool           `json:"durable"`
		AutoDelete bool           `json:"auto_delete"`
		Internal   bool           `json:"internal"`
		Arguments  map[string]any `json:"arguments"`
	} `json:"exchanges"`
	Queues []struct {
		Name       string         `json:"name"`
		Vhost      string         `json:"vhost"`
		Durable    bool           `json:"durable"`
		AutoDelete bool           `json:"auto_delete"`
		Arguments  map[string]any `json:"arguments"`
	} `json:"queues"`
	Bindings []struct {
		Source          string         `json:"source"`
		Vhost           string         `json:"vhost"`
		Destination     string         `json:"destination"`
		DestinationType string         `json:"destination_type"`
		RoutingKey      string         `json:"routing_key"`
		Arguments       map[string]any `json:"arguments"`
	} `json:"bindings"`
	Policies []struct {
		Name       string         `json:"name"`
		Vhost      string         `json:"vhost"`
		Pattern    string         `json:"pattern"`
		ApplyTo    string         `json:"apply-to"`
		Priority   int            `json:"priority"`
		Definition map[string]any `json:"definition"`
	} `json:"policies"`
}

func loadDefinitions(t *testing.T) definitions {
	t.Helper()
	raw, err := os.ReadFile(testenv.RepoPath(definitionsFile))
	if err != nil {
		t.Fatal(err)
	}
	var d definitions
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", definitionsFile, err)
	}
	return d
}

// checkUser fails unless the definitions hold user with this password (RabbitMQ's
// rabbit_password_hashing_sha256: base64 of a 4-byte salt and SHA-256(salt + password))
// and full permissions on vhost "/". who says which service logs in.
func (d definitions) checkUser(t *testing.T, user, password, who string) {
	t.Helper()
	for _, u := range d.Users {
		if u.Name != user {
			continue
		}
		h, err := base64.StdEncoding.DecodeString(u.PasswordHash)
		if err != nil || len(h) != 4+sha256.Size || u.HashingAlgorithm != "rabbit_password_hashing_sha256" {
			t.Errorf("%s: user %s: not a rabbit_password_hashing_sha256 hash", definitionsFile, user)
			return
		}
		sum := sha256.Sum256(append(append([]byte{}, h[:4]...), password...))
		if !bytes.Equal(sum[:], h[4:]) {
			t.Errorf("%s: user %s's password is not the one %s logs in with", definitionsFile, user, who)
		}
		for _, p := range d.Permissions {
			if p.User == user && p.Vhost == "/" && p.Write != "" && p.Read != "" {
				return
			}
		}
		t.Errorf("%s: user %s has no permissions on vhost /", definitionsFile, user)
		return
	}
	t.Errorf("%s: no user %s, which %s logs in as", definitionsFile, user, who)
}

// Every exchange a sample row names (the demo's orders, and the INSERTs docs/docker.md and
// the Compose file show) is declared, and its binding routes order.created to the inventory
// queue, declared as the inventory service declares it (an equivalent declaration, or
// RabbitMQ refuses the service's with 406).
func TestComposeSampleExchangesDeclared(t *testing.T) {
	c := loadCompose(t)
	d := loadDefinitions(t)
	type sample struct{ exchange, key, where string }
	samples := []sample{{order.Exchange, order.RoutingKey, "the demo's orders (examples/order-inventory/order)"}}
	for _, a := range c.Services["demo"].Command {
		if strings.HasPrefix(a, "-exchange") {
			t.Errorf("demo %s: the test reads the exchange from order.Exchange; keep the default", a)
		}
	}
	insert := regexp.MustCompile(`INSERT INTO producer_message \(([^)]*)\)\s*VALUES \(((?:[^()']|'[^']*'|\([^()]*\))*)\)`)
	for _, f := range []string{"README.md", "docs/docker.md", "docker-compose.yml", "docs/kubernetes.md"} {
		raw, err := os.ReadFile(testenv.RepoPath(f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range insert.FindAllStringSubmatch(string(raw), -1) {
			cols := splitList(m[1])
			vals := splitList(m[2])
			row := map[string]string{}
			for i := range min(len(cols), len(vals)) {
				row[cols[i]] = strings.Trim(vals[i], "'")
			}
			if row["exchange"] == "" {
				t.Errorf("%s: %q: no exchange value found", f, m[0])
				continue
			}
			samples = append(samples, sample{row["exchange"], row["routing_key"], f})
		}
	}
	if !slices.ContainsFunc(samples, func(s sample) bool { return s.where == "docs/docker.md" }) {
		t.Errorf("found no sample INSERT in docs/docker.md (it shows one): %v", samples)
	}
	for _, smp := range samples {
		exchange, key, where := smp.exchange, smp.key, smp.where
		found := false
		for _, e := range d.Exchanges {
			if e.Name == exchange && e.Vhost == "/" {
				found = true
				if e.Type != "topic" || !e.Durable || e.AutoDelete || e.Internal || len(e.Arguments) != 0 {
					t.Errorf("exchange %s: %+v, want what inventory.DeclareTopology declares (durable topic, no arguments)", exchange, e)
				}
			}
		}
		if !found {
			t.Errorf("exchange %s (used by %s) is not declared in %s: its rows would end FAILED", exchange, where, definitionsFile)
			continue
		}
		routed := false
		for _, b := range d.Bindings {
			routed = routed || (b.Source == exchange && b.Destination == inventory.Queue && b.DestinationType == "queue" && topicMatch(b.RoutingKey, key))
		}
		if !routed {
			t.Errorf("%s/%s (used by %s) is not bound to the queue %s", exchange, key, where, inventory.Queue)
		}
	}
	for _, q := range d.Queues {
		if q.Name == inventory.Queue && (!q.Durable || q.AutoDelete || !sameArgs(q.Arguments, inventory.QueueArgs)) {
			t.Errorf("queue %s: %+v, want what inventory.DeclareTopology declares (durable, arguments %v)", q.Name, q, inventory.QueueArgs)
		}
	}
}

func sameArgs(got map[string]any, want map[string]any) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// The demo's queues are quorum queues, and a policy bounds the inventory queue's
// redeliveries and dead-letters what passes the bound into a queue of its own
// (docs/operating.md, "RabbitMQ cluster and quorum queues").
func TestComposeQuorumQueues(t *testing.T) {
	d := loadDefinitions(t)
	for _, q := range d.Queues {
		if q.Arguments["x-queue-type"] != "quorum" {
			t.Errorf("queue %s: arguments %v, want x-queue-type quorum", q.Name, q.Arguments)
		}
	}
	var dlx string
	for _, p := range d.Policies {
		// "queues", not "quorum_queues": RabbitMQ before 3.12 (the stack's 3.10) knows no
		// other; a classic queue ignores delivery-limit.
		if p.ApplyTo != "queues" || !regexp.MustCompile(p.Pattern).MatchString(inventory.Queue) {
			continue
		}
		if limit, ok := p.Definition["delivery-limit"].(float64); !ok || limit < 1 {
			t.Errorf("policy %s: delivery-limit %v, want a positive bound", p.Name, p.Definition["delivery-limit"])
		}
		dlx, _ = p.Definition["dead-letter-exchange"].(string)
	}
	if dlx == "" {
		t.Fatalf("no policy with a dead-letter-exchange applies to %s", inventory.Queue)
	}
	bound := false
	for _, b := range d.Bindings {
		for _, q := range d.Queues {
			bound = bound || (b.Source == dlx && b.Destination == q.Name && b.DestinationType == "queue")
		}
	}
	declared := false
	for _, e := range d.Exchanges {
		declared = declared || e.Name == dlx
	}
	if !declared || !bound {
		t.Errorf("the dead-letter exchange %s is not declared with a queue bound to it", dlx)
	}
}

// The inventory service and the demo log in as users the definitions create.
func TestComposeConsumerLogsIn(t *testing.T) {
	c := loadCompose(t)
	d := loadDefinitions(t)
	for _, a := range c.Services["inventory"].Command {
		if v, ok := strings.CutPrefix(a, "-amqp="); ok {
			u, err := url.Parse(v)
			if err != nil || u.Hostname() != "rabbitmq" {
				t.Fatalf("inventory -amqp %s: want the rabbitmq service", v)
			}
			pw, _ := u.User.Password()
			d.checkUser(t, u.User.Username(), pw, "the inventory service")
			return
		}
	}
	t.Error("the inventory service has no -amqp=URL argument")
}

// splitList splits "a, 'b, c', UUID()" on the commas outside quotes and parentheses.
func splitList(s string) []string {
	var out []string
	depth, start, quoted := 0, 0, false
	for i, r := range s {
		switch {
		case r == '\'':
			quoted = !quoted
		case quoted:
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// topicMatch reports whether a topic binding key matches a routing key.
func topicMatch(binding, key string) bool {
	b, k := strings.Split(binding, "."), strings.Split(key, ".")
	var match func(i, j int) bool
	match = func(i, j int) bool {
		switch {
		case i == len(b):
			return j == len(k)
		case b[i] == "#":
			return match(i+1, j) || (j < len(k) && match(i, j+1))
		case j == len(k):
			return false
		case b[i] == "*" || b[i] == k[j]:
			return match(i+1, j+1)
		}
		return false
	}
	return match(0, 0)
}

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

var (
	rabbitCluster = flag.Bool("chaos.rabbit-cluster", false, "run TestRabbitClusterNodeStopped on the three-node RabbitMQ cluster "+
		"that scripts/stack.sh rabbit-cluster starts (make chaos does both)")
	clusterRate = flag.Int("chaos.rabbit-cluster-rate", 1000, "outbox rows per second in TestRabbitClusterNodeStopped")
)

// rabbitNode is one node of the stack's RabbitMQ cluster (scripts/stack.sh
// rabbit-cluster): rclu1, rclu2, rclu3@localhost on AMQP 5681-5683 and
// management 15681-15683.
type rabbitNode struct {
	name string
	amqp int
}

var rabbitNodes = []rabbitNode{{"rclu1", 5681}, {"rclu2", 5682}, {"rclu3", 5683}}

func (n rabbitNode) url() string  { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.amqp) }
func (n rabbitNode) mgmt() string { return fmt.Sprintf("http://127.0.0.1:%d", n.amqp+10000) }
func (n rabbitNode) full() string { return n.name + "@localhost" }

// TestRabbitClusterNodeStopped streams rows through a relay given the three
// nodes of a RabbitMQ cluster (broker.urls) into a quorum queue, stops the
// node the relay is connected to (rabbitmqctl stop_app, as for
// maintenance), and checks that the relay moved to another node within
// seconds and that a consumer on a third node read every row: nothing
// lost, duplicates counted. The node is started again and the cluster
// waited for, so the next run finds it whole.
func TestRabbitClusterNodeStopped(t *testing.T) {
	testenv.Integration(t)
	if !*rabbitCluster {
		t.Skip("needs the three-node RabbitMQ cluster: scripts/stack.sh rabbit-cluster, then " +
			"go test ./test/chaos/ -run TestRabbitClusterNodeStopped -chaos.rabbit-cluster (make chaos does both)")
	}
	cl := &rabbitCluster3{t: t}
	cl.waitWhole(90 * time.Second)

	db := testenv.NewDB(t, "schema/producer_message.sql")
	db.Exec(t, "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(32) NOT NULL UNIQUE, amount INT NOT NULL)")
	db.WaitReplicated(t, 30*time.Second)
	exchange, queue := testenv.UniqueName("ex_qq"), testenv.UniqueName("qq")
	cl.declareQuorumQueue(exchange, queue)

	name := testenv.UniqueName("rclu")
	httpAddr := freeAddr(t)
	urls := make([]string, len(rabbitNodes))
	for i, n := range rabbitNodes {
		urls[i] = n.url()
	}
	cfg := relaytest.Config{Name: name, Tables: relaytest.SeedTable(db.Name), Sections: map[string]string{
		"broker": fmt.Sprintf(`{urls: ["%s"]}`, strings.Join(urls, `", "`)),
		// status asks the management API of rclu3, which stays up (the relay
		// starts on rclu1, the node stopped).
		"http": fmt.Sprintf(`{addr: "%s", management_url: "http://guest:guest@127.0.0.1:%d"}`, httpAddr, rabbitNodes[2].amqp+10000),
	}}.YAML()
	cfgPath := relaytest.WriteConfig(t, cfg)
	relay := relaytest.StartedProcess(t, cfgPath)
	on := waitRelayNode(t, httpAddr, -1, 30*time.Second)
	// The management API lists a connection once its stats are emitted
	// (every 5 s by default).
	testenv.WaitFor(t, 20*time.Second, "the management API to list the relay's connection on the node its metric names", func() (bool, string) {
		via := cl.connectionNode(name)
		return via == rabbitNodes[on].full(), fmt.Sprintf("metric %s, management API %q", rabbitNodes[on].full(), via)
	})
	stopped := rabbitNodes[on]
	// The consumer is on neither the node stopped nor the one the relay
	// moves to first.
	cons := consumeQueue(t, rabbitNodes[(on+2)%3], queue)
	t.Logf("relay %s connected to %s; consumer on %s; quorum queue %s with members on %v",
		name, stopped.full(), rabbitNodes[(on+2)%3].full(), queue, cl.queueMembers(queue))

	prod := startProducer(db.Primary, exchange, *clusterRate, max(10, *clusterRate/50))
	defer func() {
		if prod != nil {
			prod.halt()
		}
	}()
	testenv.WaitFor(t, 60*time.Second, "1000 rows through the cluster before the fault", func() (bool, string) {
		n, _ := cons.counts()
		return n >= 1000, fmt.Sprintf("%d received", n)
	})

	t.Cleanup(func() { cl.startApp(stopped) }) // also when the test fails below
	before, _ := cons.counts()
	began := time.Now()
	stopDone := make(chan time.Duration, 1)
	go func() { // stop_app returns once the node's app is down: the relay may move before
		err := cl.run(stopped, "stop_app")
		if err != nil {
			t.Errorf("stop_app on %s: %v", stopped.full(), err)
		}
		stopDone <- time.Since(began)
	}()
	moved := waitRelayNode(t, httpAddr, on, 60*time.Second)
	movedAfter := time.Since(began)
	stopTook := testenv.Receive(t, stopDone, 2*time.Minute, "stop_app to return")
	gap, unconfirmed, gapOK := reconnectGap(relay.LogText(), began)
	t.Logf("stopped %s (stop_app took %s): the relay was on %s %.2f s after stop_app began",
		stopped.full(), stopTook.Round(100*time.Millisecond), rabbitNodes[moved].full(), movedAfter.Seconds())
	if gapOK {
		t.Logf("relay log: connection lost (%d messages unconfirmed) to connected on %s in %.3f s", unconfirmed, rabbitNodes[moved].full(), gap.Seconds())
	}
	if movedAfter > 15*time.Second {
		t.Errorf("the relay took %s to reach another node, want seconds", movedAfter.Round(100*time.Millisecond))
	}

	testenv.WaitFor(t, 60*time.Second, "1000 more rows through the other nodes", func() (bool, string) {
		n, _ := cons.counts()
		return n >= before+1000, fmt.Sprintf("%d received, %d at the stop", n, before)
	})
	// binlog-relay status names the node the relay's connection is on now.
	var status string
	testenv.WaitFor(t, 30*time.Second, "binlog-relay status to name the relay's connection on "+rabbitNodes[moved].full(), func() (bool, string) {
		out, _ := exec.Command(relaytest.Binary(t), "status", "--config", cfgPath).CombinedOutput()
		status = string(out)
		return strings.Contains(status, "connection "+name+" on node "+rabbitNodes[moved].full()), status
	})
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "broker ") {
			t.Logf("status: %s", l)
		}
	}
	prod.halt()
	prod = nil

	var ids []string
	testenv.WaitFor(t, 90*time.Second, "every committed row at the consumer", func() (bool, string) {
		ids = testenv.FirstColumn(t, db.Primary, "SELECT message_id FROM producer_message")
		missing := cons.missing(ids)
		return len(missing) == 0, fmt.Sprintf("%d of %d rows not received (first: %v)", len(missing), len(ids), missing[:min(len(missing), 5)])
	})
	received, dups := cons.counts()
	failed := db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE status = 'FAILED'")
	t.Logf("rows committed %d, received %d distinct, lost %d, duplicates %d (relay republished_total %s), FAILED %d",
		len(ids), received, len(cons.missing(ids)), dups, scrape(t, httpAddr, "binlog_relay_republished_total"), failed)
	if failed != 0 {
		t.Errorf("%d rows FAILED", failed)
	}
	sum, _ := strconv.ParseFloat(scrape(t, httpAddr, "binlog_relay_publish_confirm_seconds_sum"), 64)
	n, _ := strconv.ParseFloat(scrape(t, httpAddr, "binlog_relay_publish_confirm_seconds_count"), 64)
	if n > 0 {
		t.Logf("publish to confirm into the three-member quorum queue: mean %.1f ms over %.0f rows", 1000*sum/n, n)
	}

	cl.startApp(stopped)
	testenv.WaitFor(t, 60*time.Second, "the quorum queue's member on the restarted node online", func() (bool, string) {
		m := cl.queueMembers(queue)
		return len(m) == len(rabbitNodes), fmt.Sprintf("members online %v", m)
	})
	t.Logf("%s started again: the cluster is whole, the quorum queue's members online on %v", stopped.full(), cl.queueMembers(queue))
}

// rabbitCluster3 drives the cluster through scripts/stack.sh and the
// management API.
type rabbitCluster3 struct{ t *testing.T }

func (c *rabbitCluster3) ctl(n rabbitNode, args ...string) {
	c.t.Helper()
	if err := c.run(n, args...); err != nil {
		c.t.Fatal(err)
	}
}

// run is rabbitmqctl ARGS on node n (scripts/stack.sh rabbit-cluster-ctl).
func (c *rabbitCluster3) run(n rabbitNode, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{"rabbit-cluster-ctl", n.name}, args...)
	if out, err := exec.CommandContext(ctx, testenv.RepoPath("scripts/stack.sh"), args...).CombinedOutput(); err != nil {
		return fmt.Errorf("stack.sh %v: %v\n%s", args, err, out)
	}
	return nil
}

// startApp starts a node's app again (a no-op when it runs) and waits for
// the cluster to be whole.
func (c *rabbitCluster3) startApp(n rabbitNode) {
	c.t.Helper()
	c.ctl(n, "start_app")
	c.waitWhole(120 * time.Second)
}

// waitWhole waits until every node runs, as the management API of each
// sees it, and takes AMQP connections.
func (c *rabbitCluster3) waitWhole(within time.Duration) {
	c.t.Helper()
	testenv.WaitFor(c.t, within, "the three RabbitMQ nodes running (scripts/stack.sh rabbit-cluster starts them)", func() (bool, string) {
		for _, n := range rabbitNodes {
			var nodes []struct {
				Name    string `json:"name"`
				Running bool   `json:"running"`
			}
			if err := getJSON(n.mgmt()+"/api/nodes?columns=name,running", &nodes); err != nil {
				return false, fmt.Sprintf("%s: %v", n.full(), err)
			}
			running := 0
			for _, x := range nodes {
				if x.Running {
					running++
				}
			}
			if running != len(rabbitNodes) {
				return false, fmt.Sprintf("%s sees %d of %d nodes running: %+v", n.full(), running, len(rabbitNodes), nodes)
			}
			conn, err := amqp.Dial(n.url())
			if err != nil {
				return false, fmt.Sprintf("%s: %v", n.full(), err)
			}
			_ = conn.Close()
		}
		return true, ""
	})
}

// declareQuorumQueue declares a topic exchange and a quorum queue bound to
// it with "#", on the first node, deleted when the test ends; it waits for
// the queue to have a member on every node.
func (c *rabbitCluster3) declareQuorumQueue(exchange, queue string) {
	c.t.Helper()
	conn, err := amqp.Dial(rabbitNodes[0].url())
	if err != nil {
		c.t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		c.t.Fatalf("declaring exchange %s: %v", exchange, err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		c.t.Fatalf("declaring quorum queue %s: %v", queue, err)
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		c.t.Fatalf("binding %s: %v", queue, err)
	}
	_ = conn.Close()
	c.t.Cleanup(func() {
		// On any node that answers (the first may be the one stopped).
		for _, n := range rabbitNodes {
			conn, err := amqp.Dial(n.url())
			if err != nil {
				continue
			}
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(queue, false, false, false)
				_ = ch.ExchangeDelete(exchange, false, false)
			}
			_ = conn.Close()
			return
		}
	})
	testenv.WaitFor(c.t, 30*time.Second, "the quorum queue on three nodes", func() (bool, string) {
		m := c.queueMembers(queue)
		return len(m) == len(rabbitNodes), fmt.Sprintf("members online %v", m)
	})
}

// queueMembers are the nodes where the quorum queue has an online member.
func (c *rabbitCluster3) queueMembers(queue string) []string {
	for _, n := range rabbitNodes {
		var q struct {
			Online []string `json:"online"`
		}
		if err := getJSON(n.mgmt()+"/api/queues/%2F/"+url.PathEscape(queue), &q); err == nil {
			slices.Sort(q.Online)
			return q.Online
		}
	}
	return nil
}

// connectionNode is the node the relay's connection (connection_name
// name) is on, as the management API lists it.
func (c *rabbitCluster3) connectionNode(name string) string {
	for _, n := range rabbitNodes {
		var conns []struct {
			Node   string `json:"node"`
			Client struct {
				Name string `json:"connection_name"`
			} `json:"client_properties"`
		}
		if err := getJSON(n.mgmt()+"/api/connections?columns=node,client_properties.connection_name", &conns); err != nil {
			continue
		}
		for _, x := range conns {
			if x.Client.Name == name {
				return x.Node
			}
		}
		return ""
	}
	return ""
}

func getJSON(u string, into any) error {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth("guest", "guest")
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// nodeLabel is the port in binlog_relay_broker_node_info's node label.
var nodeLabel = regexp.MustCompile(`binlog_relay_broker_node_info\{[^}]*node="[^"]*:(\d+)/"[^}]*\} 1`)

// waitRelayNode waits until binlog_relay_broker_node_info names one node
// of the cluster, other than not (-1: any), and returns its index.
func waitRelayNode(t *testing.T, httpAddr string, not int, within time.Duration) int {
	t.Helper()
	at := -1
	deadline := time.Now().Add(within)
	for {
		body, err := get("http://" + httpAddr + "/metrics")
		if err == nil {
			if m := nodeLabel.FindAllStringSubmatch(body, -1); len(m) == 1 {
				port, _ := strconv.Atoi(m[0][1])
				at = slices.IndexFunc(rabbitNodes, func(n rabbitNode) bool { return n.amqp == port })
				if at >= 0 && at != not {
					return at
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the relay's binlog_relay_broker_node_info names no node other than %d (last: %d, %v)", within, not, at, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape is the value of an unlabelled metric but for the name label.
func scrape(t *testing.T, httpAddr, metric string) string {
	body, err := get("http://" + httpAddr + "/metrics")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, metric+"{") {
			return l[strings.LastIndexByte(l, ' ')+1:]
		}
	}
	return "?"
}

func get(u string) (string, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// reconnectGap reads the relay's log: the time from the binlog path's
// first "broker connection lost" line after since to its next "broker
// connected" line, and the messages unconfirmed at the loss.
func reconnectGap(log string, since time.Time) (gap time.Duration, unconfirmed int, ok bool) {
	var lost time.Time
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			TS          float64 `json:"ts"`
			Msg         string  `json:"msg"`
			Logger      string  `json:"logger"`
			Unconfirmed int     `json:"unconfirmed"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Logger != "publisher" {
			continue
		}
		sec, frac := math.Modf(l.TS)
		at := time.Unix(int64(sec), int64(frac*1e9))
		switch {
		case at.Before(since.Add(-time.Second)):
		case lost.IsZero() && strings.HasPrefix(l.Msg, "broker connection lost"):
			lost, unconfirmed = at, l.Unconfirmed
		case !lost.IsZero() && l.Msg == "broker connected":
			return at.Sub(lost), unconfirmed, true
		}
	}
	return 0, 0, false
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// nodeConsumer reads a queue on one node, acking each delivery, and
// counts each message id.
type nodeConsumer struct {
	mu   sync.Mutex
	seen map[string]int
}

func consumeQueue(t *testing.T, n rabbitNode, queue string) *nodeConsumer {
	t.Helper()
	conn, err := amqp.Dial(n.url())
	if err != nil {
		t.Fatalf("consumer on %s: %v", n.full(), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("consuming %s on %s: %v", queue, n.full(), err)
	}
	c := &nodeConsumer{seen: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range deliveries {
			c.mu.Lock()
			c.seen[d.MessageId]++
			c.mu.Unlock()
			_ = d.Ack(false)
		}
	}()
	t.Cleanup(func() { _ = conn.Close(); <-done })
	return c
}

// counts are the distinct message ids received and the duplicates.
func (c *nodeConsumer) counts() (distinct, duplicates int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.seen {
		distinct++
		duplicates += n - 1
	}
	return distinct, duplicates
}

// missing are the ids not received.
func (c *nodeConsumer) missing(ids []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, id := range ids {
		if c.seen[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

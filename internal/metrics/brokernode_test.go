package metrics

import (
	"strings"
	"sync"
	"testing"
)

// broker_node_info names each node the relay's broker connections are on,
// read at scrape time, once per node; ForgetStream drops it with the other
// series only a streaming relay exports.
func TestBrokerNodeInfo(t *testing.T) {
	m := New()
	var mu sync.Mutex
	nodes := []string{"amqp://relay:xxxxx@mq-1:5672/", "amqp://relay:xxxxx@mq-1:5672/"}
	m.WatchBrokerNodes(func() []string { mu.Lock(); defer mu.Unlock(); return nodes })
	got := gather(t, m, "binlog_relay_broker_node_info")
	if strings.Count(got, "binlog_relay_broker_node_info{") != 1 || !strings.Contains(got, `binlog_relay_broker_node_info{node="amqp://relay:xxxxx@mq-1:5672/"} 1`) {
		t.Errorf("two lanes on one node:\n%s", got)
	}
	mu.Lock()
	nodes = []string{"amqp://relay:xxxxx@mq-2:5672/"}
	mu.Unlock()
	got = gather(t, m, "binlog_relay_broker_node_info")
	if strings.Contains(got, "mq-1") || !strings.Contains(got, `node="amqp://relay:xxxxx@mq-2:5672/"} 1`) {
		t.Errorf("after moving to mq-2:\n%s", got)
	}
	m.ForgetStream()
	if got := gather(t, m, "binlog_relay_broker_node_info"); got != "" {
		t.Errorf("after ForgetStream:\n%s", got)
	}
}

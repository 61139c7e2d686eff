package lanes

import (
	"slices"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/config"
)

// fakeLane is a broker lane on a node.
type fakeLane struct {
	up   bool
	node string
}

func (f fakeLane) Connected() bool     { return f.up }
func (f fakeLane) Republished() uint64 { return 0 }
func (f fakeLane) Node() string        { return f.node }

// noNodeLane is a lane that does not say its node (a stream lane).
type noNodeLane struct{}

func (noNodeLane) Connected() bool     { return false }
func (noNodeLane) Republished() uint64 { return 0 }

// /readyz names the node each lane that is down is dialling, once, and
// binlog_relay_broker_node_info the nodes the connected lanes are on.
func TestBrokerNodesOfTheLanes(t *testing.T) {
	const a, b = "amqp://relay:xxxxx@mq-1:5672/", "amqp://relay:xxxxx@mq-2:5672/"
	ps := Set{fakeLane{true, a}, fakeLane{false, b}, fakeLane{true, a}, fakeLane{false, b}, noNodeLane{}}
	cfg := config.Broker{URLs: []string{"amqp://relay:s3cret@mq-1:5672/", "amqp://relay:s3cret@mq-2:5672/", "amqp://relay:s3cret@mq-3:5672/"}}
	if got := ps.ConnectedNodes(); !slices.Equal(got, []string{a}) {
		t.Errorf("connected nodes %v, want [%s]", got, a)
	}
	if got := ps.DownNodes(cfg); !slices.Equal(got, []string{b, a}) {
		t.Errorf("down nodes %v, want [%s %s] (the stream lane named by the first URL)", got, b, a)
	}
	why := ps.DownReason(cfg)
	if want := "broker " + b + ", " + a + " is not connected (dialling the 3 nodes of broker.urls in turn)"; why != want || strings.Contains(why, "s3cret") {
		t.Errorf("reason %q, want %q", why, want)
	}
}

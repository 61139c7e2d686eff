package app

// The broker's nodes (broker.urls): which one each lane is on, for
// /readyz and binlog_relay_broker_node_info. (check and status probe
// each: preflight.ProbeBrokerNodes.) URLs are always shown with the
// password redacted.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// nodeLane is a lane that says which broker node it is on (an AMQP
// publisher; a stream lane does not).
type nodeLane interface{ Node() string }

// connectedNodes are the nodes the connected lanes are on, each once, in
// lane order.
func (ps publishers) connectedNodes() []string {
	var out []string
	for _, p := range ps {
		if n, ok := p.(nodeLane); ok && p.Connected() && !slices.Contains(out, n.Node()) {
			out = append(out, n.Node())
		}
	}
	return out
}

// downNodes names the nodes the lanes that are not connected are dialling
// (or last dialled), each once; cfg's first URL for a lane that does not
// say.
func (ps publishers) downNodes(cfg config.Broker) []string {
	var out []string
	for _, p := range ps {
		if p.Connected() {
			continue
		}
		node := publisher.Redact(cfg.FirstURL())
		if n, ok := p.(nodeLane); ok {
			node = n.Node()
		}
		if !slices.Contains(out, node) {
			out = append(out, node)
		}
	}
	return out
}

// downReason is /readyz's reason when a lane is not connected.
func (ps publishers) downReason(cfg config.Broker) string {
	why := "broker " + strings.Join(ps.downNodes(cfg), ", ") + " is not connected"
	if n := len(cfg.Nodes()); n > 1 {
		why += fmt.Sprintf(" (dialling the %d nodes of broker.urls in turn)", n)
	}
	return why
}

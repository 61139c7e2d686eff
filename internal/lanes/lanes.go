// Package lanes owns the relay's broker lanes seen as one client: the AMQP
// publishers or stream lanes of relay.lanes, whether they are connected and
// how many messages they published again, which broker nodes (broker.urls)
// they are on for /readyz and binlog_relay_broker_node_info, and the
// relay.Lane each is to the pipeline. URLs are always shown with the
// password redacted.
package lanes

import (
	"fmt"
	"slices"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/streamlane"
)

// Set is the relay's lanes (relay.lanes), seen as one broker client by the
// health and metrics endpoints: AMQP publishers, or stream lanes.
type Set []Lane

// Lane is one lane's broker client: a *publisher.Publisher or a
// streamlane.Restarting.
type Lane interface {
	Connected() bool
	// Republished counts the messages published again after a lost
	// connection (possible duplicates).
	Republished() uint64
}

// Connected reports whether every lane is connected.
func (ps Set) Connected() bool {
	for _, p := range ps {
		if !p.Connected() {
			return false
		}
	}
	return len(ps) > 0
}

// Republished adds up the lanes' possible duplicates.
func (ps Set) Republished() uint64 {
	var n uint64
	for _, p := range ps {
		n += p.Republished()
	}
	return n
}

// Relay is the lanes as the pipeline runs them.
func (ps Set) Relay() []relay.Lane {
	out := make([]relay.Lane, len(ps))
	for i, p := range ps {
		switch p := p.(type) {
		case *publisher.Publisher:
			out[i] = publisher.Stream[relay.Ticket]{Publisher: p}
		case streamlane.Restarting[relay.Ticket]:
			out[i] = p
		}
	}
	return out
}

// nodeLane is a lane that says which broker node it is on (an AMQP
// publisher; a stream lane does not).
type nodeLane interface{ Node() string }

// ConnectedNodes are the nodes the connected lanes are on, each once, in
// lane order.
func (ps Set) ConnectedNodes() []string {
	var out []string
	for _, p := range ps {
		if n, ok := p.(nodeLane); ok && p.Connected() && !slices.Contains(out, n.Node()) {
			out = append(out, n.Node())
		}
	}
	return out
}

// DownNodes names the nodes the lanes that are not connected are dialling
// (or last dialled), each once; cfg's first URL for a lane that does not
// say.
func (ps Set) DownNodes(cfg config.Broker) []string {
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

// DownReason is /readyz's reason when a lane is not connected.
func (ps Set) DownReason(cfg config.Broker) string {
	why := "broker " + strings.Join(ps.DownNodes(cfg), ", ") + " is not connected"
	if n := len(cfg.Nodes()); n > 1 {
		why += fmt.Sprintf(" (dialling the %d nodes of broker.urls in turn)", n)
	}
	return why
}

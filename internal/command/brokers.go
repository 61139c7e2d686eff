package command

// The broker's lines in `status`: whether each node of broker.urls answers,
// and which node each of the relay's connections is on. URLs are always
// shown with the password redacted.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// brokerStatus prints one line per broker node: whether it answers, with
// its version and cluster name. The broker is not one of the servers
// status needs, so a node down does not fail it.
func (e Env) brokerStatus(ctx context.Context, w io.Writer) {
	btls, err := e.Cfg.Broker.TLSConfig()
	if err != nil {
		fmt.Fprintf(w, "broker       %v\n", err)
		return
	}
	probe := e.ProbeBroker
	if probe == nil {
		probe = preflight.ProbeBrokerNodes
	}
	probes := probe(ctx, e.Cfg.Broker, btls, 3*time.Second)
	for i, p := range probes {
		node := ""
		if len(probes) > 1 {
			node = fmt.Sprintf(" (node %d of %d)", i+1, len(probes))
		}
		if p.Err != nil {
			fmt.Fprintf(w, "broker       %s%s does not answer: %v\n", p.URL, node, p.Err)
			continue
		}
		fmt.Fprintf(w, "broker       %s%s answers: RabbitMQ %s, cluster %s\n", p.URL, node, p.Version, p.Cluster)
	}
	conns, err := e.relayConnections(ctx, btls)
	switch {
	case err != nil:
		fmt.Fprintf(w, "broker       the nodes this relay's connections are on: not read (%v); /readyz and binlog_relay_broker_node_info say\n", err)
	case len(conns) == 0:
		fmt.Fprintf(w, "broker       no connection named %s on the broker (the relay is not running, or connected too recently: the management API lists a connection once its first stats are in, within 5 s)\n", e.Cfg.Name)
	}
	for _, c := range conns {
		fmt.Fprintf(w, "broker       connection %s on node %s (port %d)%s\n", c.Client.Name, c.Node, c.Port, nodeURL(e.Cfg.Broker, c.Port))
	}
}

// mgmtConnection is a connection as the management API lists it.
type mgmtConnection struct {
	Node   string `json:"node"`
	Port   int    `json:"port"`
	Client struct {
		Name string `json:"connection_name"`
	} `json:"client_properties"`
}

// relayConnections asks the management API (http.management_url, or one
// derived from the first broker node) for the connections this relay
// opened: they are named after it (connection_name "NAME", "NAME-lane-N",
// "NAME-sweeper"). Any node's API lists the whole cluster's.
func (e Env) relayConnections(ctx context.Context, btls *tls.Config) ([]mgmtConnection, error) {
	mgmt, err := e.Cfg.HTTP.Management(e.Cfg.Broker.FirstURL())
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(mgmt)
	if err != nil {
		return nil, errors.New("http.management_url: not a URL")
	}
	user := u.User
	u.User = nil
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		strings.TrimSuffix(u.String(), "/")+"/api/connections?columns=node,port,client_properties.connection_name", nil)
	if err != nil {
		return nil, err
	}
	if user != nil {
		pw, _ := user.Password()
		req.SetBasicAuth(user.Username(), pw)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: btls, Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("management API %s: %w", u.Redacted(), errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("management API %s: %s", u.Redacted(), resp.Status)
	}
	var all []mgmtConnection
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&all); err != nil {
		return nil, fmt.Errorf("management API %s: %w", u.Redacted(), err)
	}
	var out []mgmtConnection
	for _, c := range all {
		if n := c.Client.Name; n == e.Cfg.Name || strings.HasPrefix(n, e.Cfg.Name+"-") {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(x, y mgmtConnection) int { return strings.Compare(x.Client.Name, y.Client.Name) })
	return out, nil
}

// nodeURL names the broker.urls entry on port, when exactly one has it.
func nodeURL(b config.Broker, port int) string {
	var match []string
	for _, raw := range b.Nodes() {
		if u, err := url.Parse(raw); err == nil && u.Port() == strconv.Itoa(port) {
			match = append(match, publisher.Redact(raw))
		}
	}
	if len(match) != 1 {
		return ""
	}
	return ", " + match[0]
}

package source

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

func testSources(t *testing.T, hosts ...string) (*hosts, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	s, err := newHosts(config.MySQL{Hosts: hosts, Port: 3306, User: "root"}, zap.New(core), Connector)
	if err != nil {
		t.Fatal(err)
	}
	return s, logs
}

// Without GTID there is no failover: file/position mean nothing on another
// server. The relay stays on its source and says why.
func TestFailoverRefusedWithoutGTID(t *testing.T) {
	s, logs := testSources(t, "10.255.0.1:3306", "10.255.0.2")
	pos := binlog.Position{Flavor: binlog.FlavorMariaDB, File: "binlog.000007", Pos: 1234}
	host, port, err := s.choose(context.Background(), pos, "10.255.0.1:3306")
	if err != nil || host != "10.255.0.1" || port != 3306 {
		t.Fatalf("choose = %s:%d, %v; want the same source", host, port, err)
	}
	found := logs.FilterMessageSnippet("source failover refused").All()
	if len(found) != 1 || !strings.Contains(found[0].Message, "gtid_mode=ON") {
		t.Fatalf("want one clear refusal naming the fix, got %v", found)
	}
	if s.hosts[1].Host != "10.255.0.2" || s.hosts[1].Port != 3306 {
		t.Fatalf("second host parsed as %s:%d", s.hosts[1].Host, s.hosts[1].Port)
	}
}

// Failover goes to the next replica whose binlog holds the position, and
// waits (here: until ctx ends) when none does.
func TestFailoverChoosesReplicaWithPosition(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the stack's replicas (scripts/stack.sh up)")
	}
	// internal/testenv imports this package: the stack's addresses here.
	r1h, r1p, r2h, r2p := "127.0.0.1", 3308, "127.0.0.1", 3309
	s, logs := testSources(t, r1h+":"+itoa(r1p), r2h+":"+itoa(r2p))
	have, err := s.query(context.Background(), 1, "SELECT @@gtid_binlog_pos")
	if err != nil {
		t.Fatalf("replica2 is not reachable (scripts/stack.sh up): %v", err)
	}
	host, port, err := s.choose(context.Background(), binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: have}, r1h+":"+itoa(r1p))
	if err != nil || host != r2h || int(port) != r2p {
		t.Fatalf("choose = %s:%d, %v; want replica2 %s:%d", host, port, err, r2h, r2p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	ahead := binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-999999999"}
	if _, _, err := s.choose(ctx, ahead, r2h+":"+itoa(r2p)); err == nil {
		t.Fatal("chose a replica that lacks the position")
	}
	if logs.FilterMessageSnippet("replica is behind the relay's position").Len() == 0 {
		t.Fatal("no log line says the replicas lag")
	}
}

func itoa(n int) string { return fmt.Sprint(n) }

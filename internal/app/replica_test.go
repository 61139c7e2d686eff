package app

import (
	"fmt"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/sourceinfo"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// A MariaDB position is one GTID per domain: a switchover changes the
// server id, not the order, so only sequence numbers per domain count.
func TestGTIDCovered(t *testing.T) {
	for _, c := range []struct {
		flavor, have, want string
		ok                 bool
	}{
		{binlog.FlavorMariaDB, "0-1-100", "0-1-100", true},
		{binlog.FlavorMariaDB, "0-1-100", "0-1-101", false},
		{binlog.FlavorMariaDB, "0-13-105", "0-11-100", true},     // after a switchover
		{binlog.FlavorMariaDB, "0-11-100", "0-13-105", false},    // not streamed yet
		{binlog.FlavorMariaDB, "0-1-100,77-2-5", "0-1-90", true}, // a replica-local domain
		{binlog.FlavorMariaDB, "0-1-100", "0-1-90,1-1-3", false}, // a domain the relay never saw
		{binlog.FlavorMariaDB, "0-1-90872,0-2-90873", "0-1-90873", true},
		{binlog.FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-50", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-40", true},
		{binlog.FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-40", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-50", false},
	} {
		ok, err := gtidCovered(c.flavor, c.have, c.want)
		if err != nil || ok != c.ok {
			t.Errorf("gtidCovered(%s, %q, %q) = %v, %v; want %v", c.flavor, c.have, c.want, ok, err, c.ok)
		}
	}
	if _, err := gtidCovered(binlog.FlavorMariaDB, "0-1", "0-1-1"); err == nil {
		t.Error("a malformed MariaDB GTID should be an error")
	}
}

// The delay is the age of the oldest primary position the relay has not
// checkpointed; it drops to zero once the relay has it.
func TestDelayFollowsUnstreamedPositions(t *testing.T) {
	var w replicaWatch
	t0 := time.Unix(1000, 0)
	streamed := binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-10"}
	if _, ok := w.Delay(t0); ok {
		t.Fatal("delay measured before any observation")
	}
	w.observe(binlog.FlavorMariaDB, "0-1-10", streamed, t0)
	if d, ok := w.Delay(t0.Add(5 * time.Second)); !ok || d != 0 {
		t.Fatalf("caught up: delay %v, %v", d, ok)
	}
	// The primary moves; the relay does not (a stopped SQL thread).
	w.observe(binlog.FlavorMariaDB, "0-1-11", streamed, t0.Add(2*time.Second))
	w.observe(binlog.FlavorMariaDB, "0-1-12", streamed, t0.Add(4*time.Second))
	if d, _ := w.Delay(t0.Add(10 * time.Second)); d != 8*time.Second {
		t.Fatalf("delay %v, want 8s (since 0-1-11 was seen)", d)
	}
	// The relay has 0-1-11: the delay is now from 0-1-12.
	w.observe(binlog.FlavorMariaDB, "0-1-12", binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-11"}, t0.Add(10*time.Second))
	if d, _ := w.Delay(t0.Add(10 * time.Second)); d != 6*time.Second {
		t.Fatalf("delay %v, want 6s", d)
	}
	w.observe(binlog.FlavorMariaDB, "0-1-12", binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-12"}, t0.Add(11*time.Second))
	if d, ok := w.Delay(t0.Add(11 * time.Second)); !ok || d != 0 {
		t.Fatalf("caught up again: delay %v, %v", d, ok)
	}
	// Without GTIDs the delay is not measured.
	w.observe(binlog.FlavorMySQL, "", binlog.Position{Flavor: binlog.FlavorMySQL, File: "b.1", Pos: 4}, t0)
	if _, ok := w.Delay(t0); ok {
		t.Fatal("delay measured without GTIDs")
	}
	// The list is bounded; the oldest position keeps setting the delay.
	for i := range 3 * maxPendingPositions {
		w.observe(binlog.FlavorMariaDB, fmt.Sprintf("0-1-%d", 100+i), streamed, t0.Add(time.Duration(i)*time.Second))
	}
	if len(w.pending) > maxPendingPositions {
		t.Fatalf("%d pending positions kept", len(w.pending))
	}
	if d, _ := w.Delay(t0.Add(time.Hour)); d != time.Hour {
		t.Fatalf("delay %v after many positions, want 1h", d)
	}
}

func TestPurgedMessage(t *testing.T) {
	for msg, want := range map[string]bool{
		"Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.": true,
		"Could not find first log file name in binary log index file":                                                                                       true,
		"Cannot replicate because the source purged required binary logs.":                                                                                  true,
		"A slave with the same server_uuid/server_id as this slave has connected to the master":                                                             false,
		"Error: connecting slave requested to start from GTID 0-1-5, which is not in the master's binlog":                                                   false,
	} {
		if sourceinfo.IsPurgedMessage(msg) != want {
			t.Errorf("IsPurgedMessage(%q) = %v", msg, !want)
		}
	}
}

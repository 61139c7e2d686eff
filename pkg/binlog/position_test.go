package binlog

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

func TestTrackerAppliesCommitsInOrder(t *testing.T) {
	tr, err := NewTracker(Position{Flavor: FlavorMariaDB, GTIDSet: "0-1-10"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []mysql.MariadbGTID{{DomainID: 0, ServerID: 1, SequenceNumber: 11}, {DomainID: 1, ServerID: 2, SequenceNumber: 3}, {DomainID: 0, ServerID: 1, SequenceNumber: 12}} {
		if err := tr.Apply(Commit{GTID: TxGTID{mariadb: &g}, File: "binlog.000002", Pos: 500}); err != nil {
			t.Fatal(err)
		}
	}
	got := tr.Position()
	if got.GTIDSet != "0-1-12,1-2-3" || got.File != "binlog.000002" || got.Pos != 500 {
		t.Fatalf("position %+v", got)
	}

	sid := uuid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562")
	my, err := NewTracker(Position{Flavor: FlavorMySQL, GTIDSet: sid.String() + ":1-5"})
	if err != nil {
		t.Fatal(err)
	}
	for _, gno := range []int64{6, 7} {
		if err := my.Apply(Commit{GTID: TxGTID{sid: sid, gno: gno}}); err != nil {
			t.Fatal(err)
		}
	}
	if s := my.Position().GTIDSet; s != sid.String()+":1-7" {
		t.Fatalf("MySQL set %s", s)
	}
	// GTID off: file/pos only.
	off, _ := NewTracker(Position{Flavor: FlavorMySQL, File: "a.000001", Pos: 4})
	_ = off.Apply(Commit{File: "a.000001", Pos: 900})
	if p := off.Position(); p.HasGTID() || p.Pos != 900 {
		t.Fatalf("file/pos tracker %+v", p)
	}
}

// A MariaDB position is one GTID per domain: a switchover changes the
// server id, not the order, so only sequence numbers per domain count.
func TestContainsGTID(t *testing.T) {
	const sid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	for _, c := range []struct {
		flavor, have, want string
		ok, err            bool
	}{
		{flavor: FlavorMariaDB, have: "0-1-100", want: "0-1-99", ok: true},
		{flavor: FlavorMariaDB, have: "0-1-100", want: "0-1-100", ok: true},
		{flavor: FlavorMariaDB, have: "0-1-100", want: "0-1-101"},
		{flavor: FlavorMariaDB, have: "0-13-105", want: "0-11-100", ok: true}, // after a switchover
		{flavor: FlavorMariaDB, have: "0-11-100", want: "0-13-105"},           // not streamed yet
		{flavor: FlavorMariaDB, have: "0-1-100,1-2-5", want: "1-2-5", ok: true},
		{flavor: FlavorMariaDB, have: "0-1-100,77-2-5", want: "0-1-90", ok: true}, // a replica-local domain
		{flavor: FlavorMariaDB, have: "0-1-100, 1-2-5", want: "1-3-4,0-2-100", ok: true},
		{flavor: FlavorMariaDB, have: "0-1-100,1-2-5", want: "0-1-100,1-2-6"},
		{flavor: FlavorMariaDB, have: "0-1-100", want: "1-2-5"},                           // a domain the relay never saw
		{flavor: FlavorMariaDB, have: "0-1-100", want: "0-1-90,1-1-3"},                    // one of want's domains missing
		{flavor: FlavorMariaDB, have: "0-1-90872,0-2-90873", want: "0-1-90873", ok: true}, // an old relay's text, two GTIDs in a domain
		{flavor: FlavorMariaDB, have: "0-1-100", want: "", ok: true},
		{flavor: FlavorMariaDB, have: "", want: "0-1-1"},
		{flavor: FlavorMariaDB, have: "0-1", want: "0-1-1", err: true},
		{flavor: FlavorMariaDB, have: "0-1-1", want: "0-x-1", err: true},
		{flavor: FlavorMariaDB, have: "0-1-1", want: sid + ":1-5", err: true},
		{flavor: FlavorMySQL, have: sid + ":1-50", want: sid + ":1-40", ok: true},
		{flavor: FlavorMySQL, have: sid + ":1-40", want: sid + ":1-50"},
		{flavor: FlavorMySQL, have: sid + ":1-10:20-30", want: sid + ":5-8:25", ok: true},
		{flavor: FlavorMySQL, have: sid + ":1-10:20-30", want: sid + ":15"},
		{flavor: FlavorMySQL, have: sid + ":1-50", want: sid + ":1-40,8ba8e3d0-71ca-11e1-9e33-c80aa9429562:1"},
		{flavor: FlavorMySQL, have: sid + ":1-50", want: "0-1-1", err: true},
		{flavor: "postgres", have: "1", want: "1", err: true},
	} {
		ok, err := ContainsGTID(c.flavor, c.have, c.want)
		if (err != nil) != c.err || ok != c.ok {
			t.Errorf("ContainsGTID(%s, %q, %q) = %v, %v; want %v (error: %v)", c.flavor, c.have, c.want, ok, err, c.ok, c.err)
		}
	}
}

// MariaDB's position is one GTID per domain, the last applied: a local write
// on the replica (its own server_id) or a new primary replaces the domain's
// GTID; two GTIDs in one domain are never kept (MariaDB refuses such a start
// position with ERROR 1943).
func TestTrackerMariaDBOneGTIDPerDomain(t *testing.T) {
	tr, err := NewTracker(Position{Flavor: FlavorMariaDB, GTIDSet: "0-1-100,7-1-3"})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		g    mysql.MariadbGTID
		want string
	}{
		{mysql.MariadbGTID{DomainID: 0, ServerID: 2, SequenceNumber: 101}, "0-2-101,7-1-3"}, // local write on the replica
		{mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 102}, "0-1-102,7-1-3"}, // the primary again
		{mysql.MariadbGTID{DomainID: 0, ServerID: 3, SequenceNumber: 103}, "0-3-103,7-1-3"}, // switchover to server 3
		{mysql.MariadbGTID{DomainID: 9, ServerID: 2, SequenceNumber: 1}, "0-3-103,7-1-3,9-2-1"},
		// A new primary that had not applied the old one's last transactions
		// logs a lower sequence number; it is still the last one applied.
		{mysql.MariadbGTID{DomainID: 0, ServerID: 4, SequenceNumber: 50}, "0-4-50,7-1-3,9-2-1"},
	}
	for _, st := range steps {
		g := st.g
		if err := tr.Apply(Commit{GTID: TxGTID{mariadb: &g}}); err != nil {
			t.Fatal(err)
		}
		if got := tr.Position().GTIDSet; got != st.want {
			t.Fatalf("after %s: %s, want %s", g.String(), got, st.want)
		}
	}
	my := mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 1}
	mt, _ := NewTracker(Position{Flavor: FlavorMySQL, GTIDSet: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1"})
	if err := mt.Apply(Commit{GTID: TxGTID{mariadb: &my}}); err == nil {
		t.Fatal("a MariaDB GTID was applied to a MySQL set")
	}
}

func TestParseGTIDSetPerFlavour(t *testing.T) {
	for _, c := range []struct {
		flavor, in, want, err string
	}{
		{FlavorMariaDB, "", "", ""},
		{FlavorMariaDB, "0-1-90872,0-2-90873", "0-2-90873", ""},
		{FlavorMariaDB, "0-2-90873,0-1-90872", "0-2-90873", ""},
		{FlavorMariaDB, "1-1-5, 0-1-7 ,1-2-4", "0-1-7,1-1-5", ""},
		{FlavorMariaDB, "0-1", "", `"0-1"`},
		{FlavorMariaDB, "0-x-1", "", `"0-x-1"`},
		{FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:6-9", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9", ""},
		// Tagged GTIDs (MySQL 8.3+): untagged intervals first, then each tag.
		{FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:blue:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:blue:1-5", ""},
		{FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:red:2,3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3:blue:1-5",
			"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3:blue:1-5:red:2", ""},
		{FlavorMySQL, "not-a-uuid:1", "", "not-a-uuid"},
		{"postgres", "1", "", "postgres"},
	} {
		got, err := NormalizeGTIDSet(c.flavor, c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s %q: error %v, want one naming %s", c.flavor, c.in, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s %q = %q, %v; want %q", c.flavor, c.in, got, err, c.want)
		}
	}
}

func TestTrackerMySQLTaggedGTIDs(t *testing.T) {
	sid := uuid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562")
	tr, err := NewTracker(Position{Flavor: FlavorMySQL, GTIDSet: sid.String() + ":1-2:blue:1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []TxGTID{{sid: sid, gno: 3}, {sid: sid, tag: mysql.NewTag("blue"), gno: 2}, {sid: sid, tag: mysql.NewTag("Red"), gno: 1}} {
		if err := tr.Apply(Commit{GTID: g}); err != nil {
			t.Fatal(err)
		}
	}
	want := sid.String() + ":1-3:blue:1-2:red:1"
	if got := tr.Position().GTIDSet; got != want {
		t.Fatalf("set %s, want %s", got, want)
	}
	if s := (TxGTID{sid: sid, tag: mysql.NewTag("blue"), gno: 2}).String(); s != sid.String()+":blue:2" {
		t.Fatalf("tagged GTID renders %s", s)
	}
}

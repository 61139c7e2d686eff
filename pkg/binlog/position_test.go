package binlog

import (
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

func TestContainsGTID(t *testing.T) {
	for _, c := range []struct {
		have, want string
		ok         bool
	}{
		{"0-1-100", "0-1-99", true},
		{"0-1-100", "0-1-101", false},
		{"0-1-100,1-2-5", "1-2-5", true},
		{"0-1-100", "1-2-5", false},
	} {
		ok, err := ContainsGTID(FlavorMariaDB, c.have, c.want)
		if err != nil || ok != c.ok {
			t.Errorf("ContainsGTID(%s, %s) = %v, %v; want %v", c.have, c.want, ok, err, c.ok)
		}
	}
}

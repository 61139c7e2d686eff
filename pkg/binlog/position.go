// Package binlog streams a MySQL or MariaDB replica's binary log and turns
// INSERTs into configured outbox tables into rows, with an explicit marker at
// the end of every transaction so the caller can checkpoint only whole
// transactions.
package binlog

import (
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// Flavors, as go-mysql names them.
const (
	FlavorMySQL   = mysql.MySQLFlavor
	FlavorMariaDB = mysql.MariaDBFlavor
)

// Position is where a stream stands after a whole transaction. GTIDSet is the
// executed set in the flavor's text form ("0-1-42" for MariaDB,
// "uuid:1-42" for MySQL); it is empty when the server runs without GTID and
// File/Pos are then the coordinates to resume from.
type Position struct {
	Flavor  string
	GTIDSet string
	File    string
	Pos     uint32
}

// HasGTID reports whether the position resumes by GTID.
func (p Position) HasGTID() bool { return p.GTIDSet != "" }

func (p Position) String() string {
	if p.HasGTID() {
		return fmt.Sprintf("%s gtid=%s file=%s pos=%d", p.Flavor, p.GTIDSet, p.File, p.Pos)
	}
	return fmt.Sprintf("%s file=%s pos=%d", p.Flavor, p.File, p.Pos)
}

// TxGTID identifies one transaction: MariaDB domain-server-seq or MySQL
// uuid:gno. The zero value means "no GTID" (GTID off on the server).
type TxGTID struct {
	mariadb *mysql.MariadbGTID
	sid     uuid.UUID
	gno     int64
}

// IsZero reports whether the transaction carried no GTID.
func (g TxGTID) IsZero() bool { return g.mariadb == nil && g.gno == 0 }

func (g TxGTID) String() string {
	switch {
	case g.mariadb != nil:
		return g.mariadb.String()
	case g.gno != 0:
		return fmt.Sprintf("%s:%d", g.sid, g.gno)
	default:
		return ""
	}
}

func (g TxGTID) equal(o TxGTID) bool {
	if g.mariadb != nil || o.mariadb != nil {
		return g.mariadb != nil && o.mariadb != nil && *g.mariadb == *o.mariadb
	}
	return g.sid == o.sid && g.gno == o.gno
}

// Tracker keeps the executed GTID set as transactions complete. The relay
// keeps one per stage that needs the set, fed the same ordered commits, so the
// set is never copied per transaction.
type Tracker struct {
	flavor string
	set    mysql.GTIDSet
	file   string
	pos    uint32
}

// NewTracker starts from a position.
func NewTracker(p Position) (*Tracker, error) {
	t := &Tracker{flavor: p.Flavor, file: p.File, pos: p.Pos}
	if p.HasGTID() {
		set, err := mysql.ParseGTIDSet(p.Flavor, p.GTIDSet)
		if err != nil {
			return nil, fmt.Errorf("parsing %s GTID set %q: %w", p.Flavor, p.GTIDSet, err)
		}
		t.set = set
	}
	return t, nil
}

// Apply records a completed transaction.
func (t *Tracker) Apply(c Commit) error {
	t.file, t.pos = c.File, c.Pos
	if c.GTID.IsZero() {
		return nil
	}
	if t.set == nil {
		empty, err := mysql.ParseGTIDSet(t.flavor, "")
		if err != nil {
			return err
		}
		t.set = empty
	}
	switch s := t.set.(type) {
	case *mysql.MariadbGTIDSet:
		if c.GTID.mariadb == nil {
			return fmt.Errorf("MySQL GTID %s on a MariaDB stream", c.GTID)
		}
		return s.AddSet(c.GTID.mariadb)
	case *mysql.MysqlGTIDSet:
		s.AddGTID(c.GTID.sid, c.GTID.gno)
		return nil
	default:
		return fmt.Errorf("unknown GTID set type %T", t.set)
	}
}

// Position returns the current position; the GTID set is rendered here,
// not per transaction.
func (t *Tracker) Position() Position {
	p := Position{Flavor: t.flavor, File: t.file, Pos: t.pos}
	if t.set != nil {
		p.GTIDSet = t.set.String()
	}
	return p
}

// Contains reports whether every transaction in other is already in the
// tracker's set (used to tell whether a replica has caught up with a
// checkpoint).
func ContainsGTID(flavor, have, want string) (bool, error) {
	h, err := mysql.ParseGTIDSet(flavor, have)
	if err != nil {
		return false, fmt.Errorf("parsing GTID set %q: %w", have, err)
	}
	w, err := mysql.ParseGTIDSet(flavor, want)
	if err != nil {
		return false, fmt.Errorf("parsing GTID set %q: %w", want, err)
	}
	return h.Contain(w), nil
}

package binlog

import (
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// The two flavours of source, as Position.Flavor and Config.Flavor name them.
const (
	FlavorMySQL   = "mysql"
	FlavorMariaDB = "mariadb"
)

// Position is where a stream stands after a whole transaction. GTIDSet is
// the flavour's own position text: for MariaDB one GTID per replication
// domain, the last one applied there ("0-1-42,1-7-9"); for MySQL the executed
// GTID set ("uuid:1-42", tagged "uuid:tag:1-5" since MySQL 8.3). It is empty
// when the server runs without GTID and File/Pos are then the coordinates to
// resume from.
type Position struct {
	Flavor  string
	GTIDSet string
	File    string
	Pos     uint32
}

// HasGTID reports whether the position resumes by GTID.
func (p Position) HasGTID() bool { return p.GTIDSet != "" }

// String renders the position for logs: the flavour, the GTID set when
// there is one, the binlog file and offset.
func (p Position) String() string {
	if p.HasGTID() {
		return fmt.Sprintf("%s gtid=%s file=%s pos=%d", p.Flavor, p.GTIDSet, p.File, p.Pos)
	}
	return fmt.Sprintf("%s file=%s pos=%d", p.Flavor, p.File, p.Pos)
}

// parseGTIDSet reads a position's GTID text with the flavour's semantics.
//
// MariaDB: a replica's gtid_slave_pos / gtid_binlog_pos is one GTID per
// domain, and the server refuses a position naming a domain twice (ERROR
// 1943 "conflict (duplicate domain id)"). Older relays saved one GTID per
// (domain, server_id), e.g. "0-1-90872,0-2-90873" after a local write on
// the replica or a primary switchover; such a text is normalised here to
// the highest sequence number of each domain, which within one domain is
// the last transaction applied. go-mysql would keep whichever came last in
// the text, so the relay does not rely on it.
//
// MySQL: the executed GTID set, intervals per source uuid and tag.
func parseGTIDSet(flavor, text string) (mysql.GTIDSet, error) {
	switch flavor {
	case FlavorMariaDB:
		set := &mysql.MariadbGTIDSet{Sets: map[uint32]*mysql.MariadbGTID{}}
		for _, part := range strings.Split(text, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			g, err := mysql.ParseMariadbGTID(part)
			if err != nil {
				return nil, fmt.Errorf("parsing MariaDB GTID %q: %w", part, err)
			}
			if have, ok := set.Sets[g.DomainID]; !ok || g.SequenceNumber > have.SequenceNumber {
				set.Sets[g.DomainID] = g
			}
		}
		return set, nil
	case FlavorMySQL:
		set, err := mysql.ParseMysqlGTIDSet(strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("parsing MySQL GTID set %q: %w", text, err)
		}
		return set, nil
	default:
		return nil, fmt.Errorf("parsing GTID set %q: unknown flavor %q", text, flavor)
	}
}

// NormalizeGTIDSet rewrites a GTID text in the flavour's canonical form:
// one GTID per domain for MariaDB (the highest sequence number of each, as
// a Position holds it), merged intervals for MySQL.
func NormalizeGTIDSet(flavor, text string) (string, error) {
	set, err := parseGTIDSet(flavor, text)
	if err != nil {
		return "", err
	}
	return set.String(), nil
}

// TxGTID identifies one transaction: MariaDB domain-server-seq or MySQL
// uuid[:tag]:gno. The zero value means "no GTID" (GTID off on the server).
type TxGTID struct {
	mariadb *mysql.MariadbGTID
	sid     uuid.UUID
	tag     mysql.Tag
	gno     int64
}

// IsZero reports whether the transaction carried no GTID.
func (g TxGTID) IsZero() bool { return g.mariadb == nil && g.gno == 0 }

// String is the GTID as the server writes it: domain-server-seq (MariaDB)
// or uuid[:tag]:gno (MySQL); "" for none.
func (g TxGTID) String() string {
	switch {
	case g.mariadb != nil:
		return g.mariadb.String()
	case g.gno != 0 && g.tag != (mysql.Tag{}):
		return fmt.Sprintf("%s:%s:%d", g.sid, g.tag, g.gno)
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
	return g.sid == o.sid && g.tag == o.tag && g.gno == o.gno
}

// Tracker keeps the position as transactions complete: feed it each
// Commit in stream order (Apply) and read the Position to resume from.
// Several stages that need the position each keep their own, fed the same
// commits; the GTID set is rendered only when Position is asked for, never
// copied per transaction.
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
		set, err := parseGTIDSet(p.Flavor, p.GTIDSet)
		if err != nil {
			return nil, err
		}
		t.set = set
	}
	return t, nil
}

// Apply records a completed transaction. On MariaDB the transaction's GTID
// replaces its domain's: the position is the last transaction applied in
// each domain, whatever its server_id (a local write on the replica, a new
// primary) and even if its sequence number is lower (a new primary that
// did not have the old one's last transactions; strict mode would have
// refused it on the replica, so it is what the replica applied).
func (t *Tracker) Apply(c Commit) error {
	t.file, t.pos = c.File, c.Pos
	if c.GTID.IsZero() {
		return nil
	}
	if t.set == nil {
		empty, err := parseGTIDSet(t.flavor, "")
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
		s.Sets[c.GTID.mariadb.DomainID] = c.GTID.mariadb.Clone()
		return nil
	case *mysql.MysqlGTIDSet:
		if c.GTID.mariadb != nil {
			return fmt.Errorf("MariaDB GTID %s on a MySQL stream", c.GTID)
		}
		s.AddGTIDWithTag(c.GTID.sid, c.GTID.tag, c.GTID.gno)
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

// ContainsGTID reports whether have already covers every transaction of
// want (used to tell whether a replica has caught up with a checkpoint, and
// a checkpoint with the primary). For MariaDB that is, per domain of want,
// a sequence number at least as high in have, whatever the server id:
// sequence numbers grow within a domain whichever server wrote them (a
// switchover changes the server id, not the order), and a domain missing
// from have is not covered. For MySQL have's executed set holds want's.
func ContainsGTID(flavor, have, want string) (bool, error) {
	h, err := parseGTIDSet(flavor, have)
	if err != nil {
		return false, err
	}
	w, err := parseGTIDSet(flavor, want)
	if err != nil {
		return false, err
	}
	return h.Contain(w), nil
}

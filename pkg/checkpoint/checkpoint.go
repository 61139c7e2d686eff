// Package checkpoint stores a binlog stream's resume position. The relay
// saves a checkpoint only at the end of a whole transaction below which
// every outbox row was confirmed by the broker and marked on the primary,
// so a restart replays from there and never skips.
//
// # Stored form
//
// A checkpoint is stored as one JSON object, frozen at version 1:
//
//	{"version":1,"flavor":"mysql","gtid_set":"3e11fa47-...:1-42",
//	 "binlog_file":"binlog.000003","binlog_pos":1234,
//	 "server":"server_uuid=3e11fa47-...","saved_at":"2026-12-01T13:00:00Z"}
//
// A relay that publishes to a RabbitMQ stream adds "seq" and "seq_scope"
// (Checkpoint.Seq).
//
// flavor is "mysql" or "mariadb"; gtid_set is the flavour's own GTID text
// (empty without GTID, binlog_file and binlog_pos then being the position);
// server names the source that file and position belong to. Fields are only
// ever added, never renamed or given another meaning; a change that old
// readers could misread would raise the version, and Decode refuses a
// version it does not know rather than guess. A stored object without
// "version" (saved by a relay before 0.9) reads as version 1.
//
// # Stores
//
// Store is what a stream needs of a place to keep its checkpoint. Redis
// keeps it under one key of a go-redis UniversalClient (a single node,
// Sentinel or Cluster), optionally fenced by a leader lease (WithFence).
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// Version is the version of the stored form this package writes and reads.
const Version = 1

// Checkpoint is what is stored.
type Checkpoint struct {
	// Version is the stored form's version: Encode writes Version, Decode
	// reads 0 (absent) as 1.
	Version int    `json:"version,omitempty"`
	Flavor  string `json:"flavor"`
	GTIDSet string `json:"gtid_set,omitempty"`
	File    string `json:"binlog_file,omitempty"`
	Pos     uint32 `json:"binlog_pos,omitempty"`
	// Server identifies the source the file/pos belong to (its server_uuid
	// or server_id): file/pos are meaningless on another server.
	Server  string    `json:"server,omitempty"`
	SavedAt time.Time `json:"saved_at"`
	// Seq is the publishing id of the last row at this position, and
	// SeqScope what those ids count (a relay's tables, lanes and stream):
	// a relay publishing to a RabbitMQ stream numbers the rows it reads, and
	// resumes the numbers of a checkpoint saved under its own scope, so the
	// broker drops the rows it replays. Both are absent otherwise.
	Seq      uint64 `json:"seq,omitempty"`
	SeqScope string `json:"seq_scope,omitempty"`
	// Reach is how many rows the stream had read past this position when
	// it was saved, every one of them marked SENT, recorded as failed or
	// waiting in the relay for a later batch of marks (a table's few marks
	// kept hold the position back): a relay that starts here looks for
	// rows SENT already at least this far before it publishes all it
	// reads. Absent when the position is the stream's last.
	Reach uint64 `json:"reach,omitempty"`
}

// Position is the binlog position to resume from.
func (c Checkpoint) Position() binlog.Position {
	return binlog.Position{Flavor: c.Flavor, GTIDSet: c.GTIDSet, File: c.File, Pos: c.Pos}
}

// FromPosition builds a checkpoint for a position. The position's GTID text
// comes from a binlog.Tracker, which already keeps the flavour's form.
func FromPosition(p binlog.Position, server string, at time.Time) Checkpoint {
	return Checkpoint{Flavor: p.Flavor, GTIDSet: p.GTIDSet, File: p.File, Pos: p.Pos, Server: server, SavedAt: at.UTC()}
}

// Encode renders the stored form (at Version, whatever c.Version says).
func (c Checkpoint) Encode() ([]byte, error) {
	c.Version = Version
	return json.Marshal(c)
}

// Decode parses the stored form and checks it names a position. The GTID
// text is read with the flavour's semantics and stored back in canonical
// form: a MariaDB checkpoint saved by an older relay with two GTIDs in one
// domain ("0-1-90872,0-2-90873", which MariaDB refuses as a start position)
// loads as the last one of each domain ("0-2-90873").
func Decode(b []byte) (Checkpoint, error) {
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return Checkpoint{}, fmt.Errorf("decoding checkpoint: %w", err)
	}
	switch c.Version {
	case 0:
		c.Version = Version
	case Version:
	default:
		return Checkpoint{}, fmt.Errorf("decoding checkpoint: stored form version %d is newer than this reader's %d: it was saved by a newer relay", c.Version, Version)
	}
	if c.Flavor == "" || (c.GTIDSet == "" && c.File == "") {
		return Checkpoint{}, errors.New("decoding checkpoint: it names no position")
	}
	if c.GTIDSet != "" {
		norm, err := binlog.NormalizeGTIDSet(c.Flavor, c.GTIDSet)
		if err != nil {
			return Checkpoint{}, fmt.Errorf("decoding checkpoint: %w", err)
		}
		c.GTIDSet = norm
	}
	return c, nil
}

// ErrNotFound means no checkpoint was saved yet.
var ErrNotFound = errors.New("no checkpoint saved")

// Store keeps one checkpoint. Load returns ErrNotFound when none was saved
// yet; Save replaces the stored one. A Store must be safe for concurrent use.
type Store interface {
	Load(ctx context.Context) (Checkpoint, error)
	Save(ctx context.Context, c Checkpoint) error
}

// Package checkpoint stores the relay's resume position. A checkpoint names
// the end of a whole transaction below which every outbox row was confirmed
// by the broker and marked on the primary; the relay never saves anything
// else, so a restart replays from there and never skips.
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/binlog"
)

// Checkpoint is what is stored.
type Checkpoint struct {
	Flavor  string `json:"flavor"`
	GTIDSet string `json:"gtid_set,omitempty"`
	File    string `json:"binlog_file,omitempty"`
	Pos     uint32 `json:"binlog_pos,omitempty"`
	// Server identifies the source the file/pos belong to (its server_uuid
	// or server_id): file/pos are meaningless on another server.
	Server  string    `json:"server,omitempty"`
	SavedAt time.Time `json:"saved_at"`
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

// Encode renders the stored form.
func (c Checkpoint) Encode() ([]byte, error) { return json.Marshal(c) }

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

// Store keeps one checkpoint.
type Store interface {
	Load(ctx context.Context) (Checkpoint, error)
	Save(ctx context.Context, c Checkpoint) error
}

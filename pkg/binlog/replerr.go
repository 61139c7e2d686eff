package binlog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/sourceinfo"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// ErrPositionPurged means the source no longer has the binlog the start
// position needs.
var ErrPositionPurged = errors.New("the source no longer has the binlog for the saved position")

// ErrServerIDConflict means another replica (often a second relay) is
// connected to the source with the same server_id: the source drops one of
// them. It is never answered by jumping ahead.
var ErrServerIDConflict = errors.New("another replica is connected to the source with the same server_id")

// ErrXABufferFull means prepared XA transactions hold more outbox rows
// than Config.XABufferRows or XABufferBytes allow until their XA COMMIT.
// The reader stops rather than publish rows that may still be rolled back.
var ErrXABufferFull = errors.New("the prepared XA transactions' outbox rows exceed the reader's XA buffer")

// replErrKind sorts the errors a binlog dump ends with.
type replErrKind uint8

const (
	replErrOther replErrKind = iota
	// replErrPurged: the start position is older than the oldest binlog.
	replErrPurged
	// replErrServerID: another replica registered with our server_id.
	replErrServerID
)

// serverIDMessages: when a replica registers with a server_id (or
// server_uuid) already connected, the source drops the older connection.
// MySQL ends it with 1236 "A slave with the same server_uuid/server_id as
// this slave has connected to the master" (8.0.26+: "A replica ... this
// replica has connected to the source"); MariaDB with 4052
// ER_SLAVE_SAME_ID "A slave with the same server_uuid/server_id is already
// connected" (10.11), "A slave with the same server_id is already
// connected" (11.8).
var serverIDMessages = []string{
	"same server_uuid/server_id",
	"same server_id is already connected",
}

// erSlaveSameID is MariaDB's ER_SLAVE_SAME_ID.
const erSlaveSameID = 4052

// classifyReplError tells what a binlog dump error means: a duplicate
// server_id (1236 on MySQL, 4052 on MariaDB), a purged position (1236 with
// one of purgedMessages), or anything else.
func classifyReplError(err error) (replErrKind, *mysql.MyError) {
	var my *mysql.MyError
	if !errors.As(err, &my) || (my.Code != mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG && my.Code != erSlaveSameID) {
		return replErrOther, nil
	}
	msg := strings.ToLower(my.Message)
	if my.Code == erSlaveSameID {
		return replErrServerID, my
	}
	for _, m := range serverIDMessages {
		if strings.Contains(msg, m) {
			return replErrServerID, my
		}
	}
	if sourceinfo.IsPurgedMessage(msg) {
		return replErrPurged, my
	}
	return replErrOther, my
}

// serverIDConflictAttempts is how many times in a row the source may drop
// the stream for a duplicate server_id before the reader gives up: one drop
// can be a relay restarting faster than the source noticed the old
// connection die; repeated ones are two live relays taking turns.
const serverIDConflictAttempts = 3

// streamError adds the binlog position to an error that ended a stream:
// the event that could not be read starts at file:pos (the end of the last
// event handled). go-mysql recovers a panic in its parser into an error
// starting "panic", with a goroutine stack after the first line; the stack
// is dropped and the error says the event may be corrupt.
func streamError(err error, file string, pos uint32) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if strings.HasPrefix(err.Error(), "panic") {
		first, _, _ := strings.Cut(err.Error(), "\n")
		return fmt.Errorf("binlog event after %s:%d could not be decoded (the parser failed: %s); the event may be corrupt: check it with mysqlbinlog --start-position=%d %s",
			file, pos, first, pos, file)
	}
	return fmt.Errorf("reading the binlog after %s:%d: %w", file, pos, err)
}

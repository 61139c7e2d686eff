package binlog

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// XA transactions in the binlog (MySQL 5.7.7+, MariaDB 10.5+) are two
// transactions: the branch's rows between "XA START xid" and "XA END xid",
// closed by an XA_PREPARE_LOG_EVENT ("XA PREPARE"), and later, as its own
// event group, "XA COMMIT xid" or "XA ROLLBACK xid". Rows of a prepared
// branch are held here and emitted in the XA COMMIT transaction, or dropped
// on XA ROLLBACK, so a rolled-back branch never publishes anything.
//
// What is held lives in memory only, so the commits read while a branch
// with outbox rows is prepared carry Commit.OpenXA and the relay does not
// save a checkpoint past the prepare: a relay restarted between XA PREPARE
// and XA COMMIT reads the branch again (and replays what came after it, as
// after any crash). An XA COMMIT whose prepare lies before the start
// position (a checkpoint saved by an older relay) is logged as such, and
// rows of a status table are left to the sweeper.

// mariadbFlPreparedXA is MariaDB's Gtid_log_event flag FL_PREPARED_XA (64,
// sql/log_event.h): the event group is an XA branch up to its XA PREPARE.
// go-mysql decodes the flags but names only the lower ones.
const mariadbFlPreparedXA = 64

// xaBranch is one XA transaction's rows in binlog order.
type xaBranch struct {
	xid  string
	held txRows
}

// xaPrepared holds the prepared branches by xid, and the totals that are
// bounded by Config.XABufferRows and XABufferBytes.
type xaPrepared struct {
	prepared  map[string]*xaBranch
	heldRows  int
	heldBytes int64
}

// xaStmt is an XA statement as the binlog logs it.
type xaStmt struct {
	verb     string // START, END, PREPARE, COMMIT, ROLLBACK
	xid      string // normalised: X'..',X'..',n in lower case, no spaces
	onePhase bool
}

// parseXA recognises "XA START|BEGIN|END|PREPARE|COMMIT|ROLLBACK xid
// [options]". The xid is logged in the server's serialised form
// (X'hex',X'hex',formatID) in both the branch and its XA COMMIT, so the
// text identifies the branch.
func parseXA(q string) (xaStmt, bool) {
	f := strings.Fields(q)
	if len(f) < 2 || !strings.EqualFold(f[0], "XA") {
		return xaStmt{}, false
	}
	st := xaStmt{verb: strings.ToUpper(f[1])}
	switch st.verb {
	case "BEGIN":
		st.verb = "START"
	case "START", "END", "PREPARE", "COMMIT", "ROLLBACK":
	default:
		return xaStmt{}, false
	}
	rest := f[2:]
	// Trailing options are keywords; the xid itself is quoted or numeric.
	for len(rest) > 0 {
		switch strings.ToUpper(rest[len(rest)-1]) {
		case "PHASE":
			if len(rest) >= 2 && strings.EqualFold(rest[len(rest)-2], "ONE") {
				st.onePhase = true
				rest = rest[:len(rest)-2]
				continue
			}
		case "JOIN", "RESUME", "SUSPEND", "MIGRATE", "FOR":
			rest = rest[:len(rest)-1]
			continue
		}
		break
	}
	st.xid = strings.ToLower(strings.Join(rest, ""))
	return st, true
}

// xaStatement handles an XA query event.
func (s *stream) xaStatement(ctx context.Context, ev *replication.BinlogEvent, st xaStmt) error {
	switch st.verb {
	case "START":
		if s.phase.Load() != phaseOpen {
			if err := s.beginTx(TxGTID{}); err != nil {
				return err
			}
		}
		s.inTx = true
		s.xa = &xaBranch{xid: st.xid}
		return nil
	case "END":
		if s.xa != nil && s.xa.xid == "" {
			s.xa.xid = st.xid // MariaDB: XA START was in the GTID event
		}
		return nil
	case "PREPARE":
		return s.xaPrepare(ctx, ev, nil)
	case "COMMIT":
		if s.xa != nil && st.onePhase {
			// XA COMMIT xid ONE PHASE right after XA END: no prepare.
			b := s.xa
			s.xa = nil
			s.release(b)
			return s.emitBranch(ctx, ev, b)
		}
		b := s.prepared[st.xid]
		if b == nil {
			s.r.log.Warn("XA COMMIT of a transaction prepared before the stream's start position: its rows were not read; the sweeper sends those of status tables",
				"xid", st.xid, "binlog_file", s.tracker.file, "binlog_pos", ev.Header.LogPos)
			b = &xaBranch{xid: st.xid}
		}
		return s.emitBranch(ctx, ev, b)
	case "ROLLBACK":
		if b := s.prepared[st.xid]; b != nil {
			s.release(b)
		}
		s.xa = nil
		return s.commit(ctx, ev)
	}
	return nil
}

// xaPrepare ends the branch being read: XA_PREPARE_LOG_EVENT (data is its
// body: one_phase byte, then the xid) or an "XA PREPARE" query (data nil).
// The prepare is a transaction of its own: the position moves past it with
// no rows.
func (s *stream) xaPrepare(ctx context.Context, ev *replication.BinlogEvent, data []byte) error {
	b := s.xa
	s.xa = nil
	if b == nil {
		return s.commit(ctx, ev)
	}
	if b.xid == "" {
		b.xid = xidOfPrepare(data)
	}
	if len(data) > 0 && data[0] != 0 {
		// One-phase commit logged as a prepare event with one_phase set:
		// the branch is committed here.
		s.release(b)
		return s.emitBranch(ctx, ev, b)
	}
	if s.prepared == nil {
		s.prepared = map[string]*xaBranch{}
	}
	if old := s.prepared[b.xid]; old != nil {
		s.release(old)
	}
	s.prepared[b.xid] = b
	s.heldRows += b.held.count
	s.heldBytes += b.held.bytes
	return s.commit(ctx, ev)
}

// xidOfPrepare reads the xid of an XA_PREPARE_LOG_EVENT body (one_phase
// byte, formatID, gtrid length, bqual length as 4-byte integers, then gtrid
// and bqual) in the form XA queries are logged with: x'gtrid',x'bqual',formatID.
func xidOfPrepare(data []byte) string {
	if len(data) < 13 {
		return ""
	}
	format := binary.LittleEndian.Uint32(data[1:])
	gl, bl := int(binary.LittleEndian.Uint32(data[5:])), int(binary.LittleEndian.Uint32(data[9:]))
	if gl < 0 || bl < 0 || 13+gl+bl > len(data) {
		return ""
	}
	return fmt.Sprintf("x'%x',x'%x',%d", data[13:13+gl], data[13+gl:13+gl+bl], format)
}

// emitBranch sends a committed branch's rows in the current transaction and
// commits it.
func (s *stream) emitBranch(ctx context.Context, ev *replication.BinlogEvent, b *xaBranch) error {
	if s.prepared[b.xid] == b {
		s.release(b)
	}
	for _, row := range b.held.take() {
		if err := s.emitRow(ctx, row); err != nil {
			return err
		}
	}
	return s.commit(ctx, ev)
}

// xaHold adds a row to the branch being read, within the bounds.
func (s *stream) xaHold(row *outbox.Row) error {
	size := rowBytes(row)
	if s.xa.held.get(keyOf(row)) == nil &&
		(s.heldRows+s.xa.held.count+1 > s.r.cfg.XABufferRows || s.heldBytes+s.xa.held.bytes+size > s.r.cfg.XABufferBytes) {
		return &fatalError{fmt.Errorf("%w: XA transaction %s at %s holds more outbox rows than the reader may keep until XA COMMIT (%d rows, %d bytes for all prepared XA transactions: Config.XABufferRows / XABufferBytes): raise the bound or commit XA transactions in smaller branches",
			ErrXABufferFull, s.xa.xid, s.tracker.file, s.r.cfg.XABufferRows, s.r.cfg.XABufferBytes)}
	}
	s.xa.held.put(row)
	return nil
}

// release forgets a prepared branch (committed or rolled back).
func (s *stream) release(b *xaBranch) {
	if s.prepared[b.xid] == b {
		delete(s.prepared, b.xid)
		s.heldRows -= b.held.count
		s.heldBytes -= b.held.bytes
	}
}

// rowBytes estimates a row's memory: its byte and string values plus a
// word for every other value.
func rowBytes(row *outbox.Row) int64 {
	var n int64
	for k, v := range row.Values {
		n += int64(len(k))
		switch x := v.(type) {
		case []byte:
			n += int64(len(x))
		case string:
			n += int64(len(x))
		default:
			n += 8
		}
	}
	return n
}

package binlog

import (
	"context"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// A transaction's outbox rows are published as the transaction committed
// them, not as each statement wrote them: an application that inserts a
// row and then updates it in the same transaction (an ORM flushing an
// entity twice, a field filled in after the insert) committed only the
// updated version. So the reader holds the publishable rows of the open
// transaction (txRows) and applies the transaction's later UPDATEs and
// DELETEs of them before it sends them, at the commit. Past
// Config.TxBufferRows or TxBufferBytes the held rows are sent early (the
// relay's byte budget weighs them from there); an UPDATE of a row already
// sent that way sends the row's new version too, and the transaction's
// commit logs how many did.
//
// An UPDATE of a row written before the transaction is a new event when it
// makes the row publishable again (a re-queue: REPLACE over a SENT row
// where the server updates it in place, INSERT ... ON DUPLICATE KEY UPDATE
// status='PENDING', an application's own UPDATE back to PENDING), unless
// its next_retry_time is still ahead: the sweeper sends it then. The same
// holds for a REPLACE the server logs as a DELETE and an INSERT (when the
// row conflicts on a key other than the last unique one, as by id and
// message id): an INSERT of a row this transaction deleted is that
// re-queue, and waits for a next_retry_time scheduled later than the row
// was created. A new row is published at once whatever its
// next_retry_time says: applications that also poll the table set it to
// "now plus a delay" at the insert, for their own retry job.
//
// A DELETE of a row inserted earlier in the same transaction does not take
// the message back: the Debezium outbox pattern inserts and deletes in one
// transaction so the table stays empty, and the insert is the message. The
// row is published as last written, with Row.Deleted set (there is no row
// left to mark SENT).

// rowKey identifies a row of an outbox table within a transaction.
type rowKey struct {
	t  *outbox.Table
	id any
}

func keyOf(row *outbox.Row) rowKey {
	id := row.ID
	if b, ok := id.([]byte); ok {
		id = string(b) // []byte is not comparable
	}
	return rowKey{row.Table, id}
}

// txRows holds rows in binlog order with an index by key: the open
// transaction's rows not yet sent, or one XA branch's.
type txRows struct {
	rows  []*outbox.Row // nil where a row was dropped
	at    map[rowKey]int
	count int // non-nil rows
	bytes int64
}

// put adds a row, or replaces the held row with its key (keeping its
// place: the order is that of the first write).
func (b *txRows) put(row *outbox.Row) {
	if b.at == nil {
		b.at = map[rowKey]int{}
	}
	k := keyOf(row)
	if i, ok := b.at[k]; ok {
		b.bytes += rowBytes(row) - rowBytes(b.rows[i])
		b.rows[i] = row
		return
	}
	b.at[k] = len(b.rows)
	b.rows = append(b.rows, row)
	b.count++
	b.bytes += rowBytes(row)
}

// get returns the held row with k.
func (b *txRows) get(k rowKey) *outbox.Row {
	if i, ok := b.at[k]; ok {
		return b.rows[i]
	}
	return nil
}

// drop forgets the held row with k.
func (b *txRows) drop(k rowKey) {
	if i, ok := b.at[k]; ok {
		b.bytes -= rowBytes(b.rows[i])
		b.rows[i] = nil
		b.count--
		delete(b.at, k)
	}
}

// take returns the held rows in order and empties the buffer.
func (b *txRows) take() []*outbox.Row {
	out := make([]*outbox.Row, 0, b.count)
	for _, r := range b.rows {
		if r != nil {
			out = append(out, r)
		}
	}
	*b = txRows{}
	return out
}

// sentCap bounds the keys of rows sent early that one transaction keeps to
// recognise a later UPDATE of them (about 50 bytes each).
const sentCap = 1 << 20

// txState is what the stream knows of the open transaction's rows.
type txState struct {
	held txRows
	// sent are the keys of rows this transaction sent before its commit
	// (past the buffer's bounds); an UPDATE of one sends its new version.
	sent     map[rowKey]struct{}
	sentFull bool // sentCap reached: later rows are not remembered
	// resent counts rows sent again after an UPDATE (logged at commit);
	// deferred counts re-queued rows left to the sweeper until due.
	resent, deferred int
	// replaced are the keys of rows of earlier transactions this one
	// deleted (up to replacedCap), in tables with a next_retry_time: an
	// INSERT of one is a REPLACE.
	replaced map[rowKey]struct{}
}

// replacedCap bounds the deleted keys a transaction keeps to recognise a
// REPLACE (an archiver deleting a million rows in one transaction keeps
// the first ones); an INSERT past it is a new row.
const replacedCap = 1 << 16

// noteDeleted remembers the key of a row of an earlier transaction that
// this one deleted.
func (tx *txState) noteDeleted(k rowKey) {
	if tx.replaced == nil {
		tx.replaced = map[rowKey]struct{}{}
	}
	if len(tx.replaced) < replacedCap {
		tx.replaced[k] = struct{}{}
	}
}

// image is one row image of a rows event, decoded with the layout.
type image struct {
	row     *outbox.Row
	retryAt any // next_retry_time, when the table has one
	// createdAt is created_at, read beside next_retry_time (ok false
	// without one).
	createdAt time.Time
	createdOK bool
}

// emitRows applies one rows event of an outbox table to the open
// transaction (or XA branch).
func (s *stream) emitRows(ctx context.Context, ev *replication.BinlogEvent, e *replication.RowsEvent) error {
	t := s.r.outboxTable(string(e.Table.Schema), string(e.Table.Table))
	if t.Entry != nil && s.r.refusedTable(s.r.tableID(t.Schema, t.Name)) {
		return nil // refused until DDL changes it (tables.go)
	}
	// Rows under the configured name: a name a rename left empty holds a
	// table again (created under it).
	s.syncRenames()
	s.renames.RowsRead(s.r.indexOf(t))
	lay, err := s.r.layoutFor(ctx, t, e.Table)
	if err != nil && t.Entry != nil {
		// A table a pattern matched: refused alone, the others flow.
		s.refuse(t, err)
		return nil
	}
	if err != nil {
		return &fatalError{errorAt(t, ev, s, err)}
	}
	typ := rowsKind(ev.Header.EventType)
	if typ == replication.EnumRowsEventTypeUpdate {
		_, fullBefore := lay.missingFrom(e.ColumnBitmap1)
		_, fullAfter := lay.missingFrom(e.ColumnBitmap2)
		if !fullBefore || !fullAfter {
			return s.partialUpdate(ev, e, t, lay)
		}
	} else if col, ok := lay.missingFrom(e.ColumnBitmap1); !ok {
		// The start-up check refuses a row image other than FULL, but the
		// source's setting can change while the relay runs.
		return &fatalError{rowImageError(t, ev, s, col)}
	}
	step := 1
	if typ == replication.EnumRowsEventTypeUpdate {
		step = 2 // before and after image
	}
	for i := 0; i+step <= len(e.Rows); i += step {
		s.txRows++
		var err error
		// Most UPDATEs and DELETEs of outbox rows concern nothing held (the
		// relay's own SENT marks, an archiver's deletes): they are told by
		// the id and status alone, without building the rows.
		switch typ {
		case replication.EnumRowsEventTypeInsert:
			err = s.inserted(ctx, s.image(lay, t, ev, e.Rows[i]))
		case replication.EnumRowsEventTypeUpdate:
			if s.concerns(lay, t, e.Rows[i], e.Rows[i+1]) {
				if perr := lay.partialJSONError(e.Rows[i+1]); perr != nil {
					// Never the draft, nor a diff: stop, and say why.
					return &fatalError{errorAt(t, ev, s, perr)}
				}
				err = s.updated(ctx, s.image(lay, t, ev, e.Rows[i]), s.image(lay, t, ev, e.Rows[i+1]))
			}
		case replication.EnumRowsEventTypeDelete:
			if k, _ := lay.key(t, e.Rows[i]); s.rows().get(k) != nil {
				s.deleted(s.image(lay, t, ev, e.Rows[i]))
			} else if lay.retryAt >= 0 && s.xa == nil {
				s.tx.noteDeleted(k)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// partialUpdate takes an UPDATE logged with a partial row image
// (binlog_row_image=MINIMAL or NOBLOB in the writing session): the relay's
// own SENT marks where its session logs them minimal (internal/rowstatus)
// and the source passes that image on (a replica logs what it applies with
// its own binlog_row_image, so this is a source at MINIMAL, or the primary
// read directly). Such an UPDATE is told by what it holds, without
// building a row: the id in the before image, the status in the after one.
// It changes nothing the relay publishes when the row is not held by the
// open transaction (nor sent early by it) and the after image sets a status
// that is not publishable (a mark, a FAILED record). Anything else (a
// publishable status: maybe a re-queue; a held row; no id or no status in
// the images) cannot be published from a partial image nor safely passed
// over: the stream stops and says which column is missing, as for any
// partial image.
func (s *stream) partialUpdate(ev *replication.BinlogEvent, e *replication.RowsEvent, t *outbox.Table, lay *layout) error {
	fail := func() error {
		col, ok := lay.missingFrom(e.ColumnBitmap2)
		if ok {
			col, _ = lay.missingFrom(e.ColumnBitmap1)
		}
		return &fatalError{rowImageError(t, ev, s, col)}
	}
	if !lay.has(e.ColumnBitmap1, lay.idCell) || !lay.has(e.ColumnBitmap2, lay.statusCell) {
		return fail()
	}
	for i := 0; i+2 <= len(e.Rows); i += 2 {
		s.txRows++
		k, _ := lay.key(t, e.Rows[i])
		if s.rows().get(k) != nil {
			return fail()
		}
		if _, ok := s.tx.sent[k]; ok && s.xa == nil {
			return fail()
		}
		if _, publishable := lay.key(t, e.Rows[i+1]); publishable {
			return fail()
		}
	}
	return nil
}

// rowsKind is what a rows event does, by its event type (the rows event's
// own Type reads a field only go-mysql's parser sets).
func rowsKind(et replication.EventType) replication.EnumRowsEventType {
	switch et {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2,
		replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
		return replication.EnumRowsEventTypeInsert
	case replication.UPDATE_ROWS_EVENTv0, replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2,
		replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1,
		// binlog_row_value_options=PARTIAL_JSON: JSON columns logged as
		// diffs, which decodeRows applied to the before image
		// (partialjson.go).
		replication.PARTIAL_UPDATE_ROWS_EVENT:
		return replication.EnumRowsEventTypeUpdate
	case replication.DELETE_ROWS_EVENTv0, replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2,
		replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1:
		return replication.EnumRowsEventTypeDelete
	}
	return replication.EnumRowsEventTypeUnknown
}

func (s *stream) image(lay *layout, t *outbox.Table, ev *replication.BinlogEvent, values []any) image {
	row := lay.row(t, values)
	row.EventTime = ev.Header.Timestamp
	im := image{row: row}
	if lay.retryAt >= 0 && lay.retryAt < len(values) {
		im.retryAt = lay.retryValue(t, values[lay.retryAt])
		im.createdAt, im.createdOK = lay.createdValue(t, values)
	}
	return im
}

// rows is where the open transaction's or XA branch's rows are held.
func (s *stream) rows() *txRows {
	if s.xa != nil {
		return &s.xa.held
	}
	return &s.tx.held
}

// concerns tells whether an UPDATE's images can change what is published:
// the row is held or was sent early in this transaction, or it goes from a
// status that is not publishable to one that is.
func (s *stream) concerns(lay *layout, t *outbox.Table, before, after []any) bool {
	k, wasPub := lay.key(t, before)
	if s.rows().get(k) != nil {
		return true
	}
	if _, ok := s.tx.sent[k]; ok && s.xa == nil {
		return true
	}
	_, isPub := lay.key(t, after)
	return isPub && !wasPub
}

func (s *stream) inserted(ctx context.Context, im image) error {
	if !im.row.Table.IsPublishable(im.row.Values[im.row.Table.Columns.Status]) {
		return nil
	}
	if _, replace := s.tx.replaced[keyOf(im.row)]; replace && im.scheduled() {
		s.tx.deferred++
		return nil
	}
	return s.hold(ctx, im.row)
}

// scheduled tells whether a REPLACE's inserted row's next_retry_time puts
// it off past its commit. Only a next_retry_time later than the row's own
// created_at counts (by more than a second, a DATETIME's rounding): an
// application whose clock is ahead of the primary's writes both columns
// from it, and a new row whose next_retry_time is NULL or not later than
// its created_at is due now, whatever the clocks say. Without a created_at
// to compare with, a new row is due now.
func (im image) scheduled() bool {
	retry, ok := im.retryAt.(time.Time)
	if !ok || retry.IsZero() || !im.createdOK || !retry.After(im.createdAt.Add(time.Second)) {
		return false
	}
	due, _ := retryDue(retry, im.row.EventTime)
	return !due
}

// hold keeps a row until the commit, within the bounds: an XA branch past
// them is an error, a transaction past them sends what it holds.
func (s *stream) hold(ctx context.Context, row *outbox.Row) error {
	if s.xa != nil {
		return s.xaHold(row)
	}
	s.tx.held.put(row)
	if s.tx.held.count >= s.r.cfg.TxBufferRows || s.tx.held.bytes >= s.r.cfg.TxBufferBytes {
		return s.flush(ctx)
	}
	return nil
}

func (s *stream) updated(ctx context.Context, before, after image) error {
	t := after.row.Table
	k := keyOf(before.row)
	held := s.rows()
	publishable := t.IsPublishable(after.row.Values[t.Columns.Status])
	if held.get(k) != nil {
		// Written earlier in this transaction: the commit has this version.
		if keyOf(after.row) != k || !publishable {
			held.drop(k)
		}
		if publishable {
			after.row.Deleted = false
			return s.hold(ctx, after.row)
		}
		return nil
	}
	if _, ok := s.tx.sent[k]; ok && s.xa == nil {
		// Sent before the commit (a transaction past the buffer's bounds):
		// send the committed version too.
		if publishable {
			s.tx.resent++
			return s.hold(ctx, after.row)
		}
		return nil
	}
	if !publishable || t.IsPublishable(before.row.Values[t.Columns.Status]) {
		// Still pending (already on its way), or no longer publishable
		// (the relay's own SENT marks): nothing new to send.
		return nil
	}
	// Put back to a publishable status: a re-queue.
	if due, ok := retryDue(after.retryAt, after.row.EventTime); ok && !due {
		s.tx.deferred++
		return nil
	}
	return s.hold(ctx, after.row)
}

func (s *stream) deleted(im image) {
	if row := s.rows().get(keyOf(im.row)); row != nil {
		row.Deleted = true
	}
}

// flush sends the transaction's held rows before its commit. A reconnect
// reads the transaction again from its start and stops again at the same
// image (the bounds see the same rows), so the rows of every flush up to
// the image a previous connection reached (skipUpTo) are not sent twice.
func (s *stream) flush(ctx context.Context) error {
	rows := s.tx.held.take()
	resumed := s.skipTx && s.txRows <= s.skipUpTo
	for _, row := range rows {
		if !resumed {
			if err := send(ctx, s.out, Event{Kind: KindRow, Row: row}); err != nil {
				return err
			}
		}
		if s.tx.sentFull {
			continue
		}
		if s.tx.sent == nil {
			s.tx.sent = map[rowKey]struct{}{}
		}
		if len(s.tx.sent) >= sentCap {
			s.tx.sentFull = true
			s.r.log.Warn("a very large transaction: rows it updates later than its first million outbox rows are published as first written",
				"gtid", s.txGTID.String(), "binlog_file", s.tracker.file)
			continue
		}
		k := keyOf(row)
		if id, ok := k.id.(string); ok {
			// go-mysql's strings share the event's buffer: a key kept for
			// the rest of the transaction must not keep the buffer.
			k.id = strings.Clone(id)
		}
		s.tx.sent[k] = struct{}{}
	}
	s.done = max(s.done, s.txRows)
	return nil
}

// endTx sends the rest of the transaction's rows at its commit and says
// what the transaction did beyond plain inserts.
func (s *stream) endTx(ctx context.Context, ev *replication.BinlogEvent) error {
	if s.tx.held.count > 0 {
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	if s.tx.resent > 0 {
		s.r.log.Warn("rows updated in their own transaction after the reader had sent them (a transaction past Config.TxBufferRows/TxBufferBytes): their committed version was published too, under the same message id",
			"rows", s.tx.resent, "gtid", s.txGTID.String(), "binlog_file", s.tracker.file, "binlog_pos", ev.Header.LogPos)
	}
	if s.tx.deferred > 0 {
		s.r.log.Info("rows put back to pending with a next retry time ahead: the sweeper sends them when due",
			"rows", s.tx.deferred, "gtid", s.txGTID.String(), "binlog_file", s.tracker.file, "binlog_pos", ev.Header.LogPos)
	}
	s.tx = txState{}
	return nil
}

// retryDue tells whether a row's next_retry_time (as decoded) has come at
// the event's commit time (seconds, the source's clock); ok is false when
// the row has none.
func retryDue(v any, eventTime uint32) (due, ok bool) {
	tm, isTime := v.(time.Time)
	if !isTime || tm.IsZero() || eventTime == 0 {
		return true, false
	}
	return !tm.After(time.Unix(int64(eventTime)+1, 0)), true
}

package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Partial JSON updates. With binlog_row_value_options=PARTIAL_JSON (MySQL
// 8.0.3+, a global or session setting) an UPDATE that changes a JSON
// column with JSON_SET, JSON_REPLACE or JSON_REMOVE is logged as a
// PARTIAL_UPDATE_ROWS_EVENT whose after image holds, for that column, only
// the changes: a list of diffs (an operation, a path, a value). The
// before image holds the whole document (binlog_row_image=FULL), so the
// document as committed is the before image with the diffs applied in
// order, as the server applies them (Json_diff_vector, sql/json_diff.cc).
//
// go-mysql decodes such a column into its first diff only
// (replication.JsonDiff); the reader reads the whole list from the event
// itself: it walks the row images to the column's bytes (valueLength
// mirrors go-mysql's decodeValue and MySQL's log_event.cc), splits the
// list, has go-mysql render each diff's value (with the same options as
// every other JSON value), applies them to the before image's document
// (jsondoc.go) and puts the document in the after image, where go-mysql
// left the first diff. A column it cannot rebuild exactly is left as a
// partialJSONError: a row of it that would be published stops the reader
// with an error saying how to turn the setting off.
// https://dev.mysql.com/doc/refman/8.4/en/replication-options-binary-log.html#sysvar_binlog_row_value_options

// partialJSONFix is what an operator runs to stop partial JSON updates.
const partialJSONFix = "SET PERSIST binlog_row_value_options = '' on the primary and its replicas " +
	"(and in any session that sets it: SET SESSION binlog_row_value_options = '')"

// partialJSONError stands for a JSON column of a partial update that could
// not be rebuilt.
type partialJSONError struct{ err error }

func (e *partialJSONError) Error() string {
	return "a partial JSON update (binlog_row_value_options=PARTIAL_JSON) could not be applied to the document: " + e.err.Error() +
		"; to publish such rows, " + partialJSONFix
}

// partialColumn is one JSON column logged as diffs in an after image.
type partialColumn struct {
	row, col   int // e.Rows index of the after image, column index
	start, end int // the column's bytes in the event data, length prefix included
	diffs      []rawDiff
}

type rawDiff struct {
	op    replication.JsonDiffOperation
	path  string
	raw   []byte // the diff's bytes, as logged
	value string // rendered by go-mysql (not for a removal)
}

// resolvePartialJSON replaces, in a decoded PARTIAL_UPDATE_ROWS_EVENT, each
// JSON column logged as diffs by the document they make of the before
// image's (or a partialJSONError). data and pos are what DecodeData read.
func resolvePartialJSON(e *replication.RowsEvent, data []byte, pos int) {
	var (
		cols []partialColumn
		err  error
	)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reading the event: %v", p)
			markUnresolved(e, err)
		}
	}()
	cols, err = partialColumns(e, data, pos)
	if err == nil {
		err = renderDiffValues(e, data, pos, cols)
	}
	for _, c := range cols {
		if c.row >= len(e.Rows) || c.row == 0 {
			continue
		}
		if err != nil {
			e.Rows[c.row][c.col] = &partialJSONError{err}
			continue
		}
		doc, derr := applyDiffs(e.Rows[c.row-1][c.col], c.diffs)
		if derr != nil {
			e.Rows[c.row][c.col] = &partialJSONError{derr}
			continue
		}
		e.Rows[c.row][c.col] = doc
	}
	if err != nil {
		markUnresolved(e, err)
	}
}

// markUnresolved stands err in for every JSON column of an after image
// that go-mysql left as a diff.
func markUnresolved(e *replication.RowsEvent, err error) {
	for i := 1; i < len(e.Rows); i += 2 {
		for j, v := range e.Rows[i] {
			if _, ok := v.(*replication.JsonDiff); ok {
				e.Rows[i][j] = &partialJSONError{err}
			}
		}
	}
}

// partialColumns walks the event's row images (before, after, ...) and
// returns the JSON columns logged as diffs, with their diffs split. The
// walk must end exactly where the data does, or the event is not what the
// walk understood.
func partialColumns(e *replication.RowsEvent, data []byte, pos int) ([]partialColumn, error) {
	tm := e.Table
	var cols []partialColumn
	row := 0
	for pos < len(data) {
		n, _, err := walkImage(tm, data, pos, e.ColumnBitmap1, false, nil)
		if err != nil {
			return nil, fmt.Errorf("before image %d: %w", row/2, err)
		}
		pos += n
		row++
		var found []partialColumn
		n, found, err = walkImage(tm, data, pos, e.ColumnBitmap2, true, &row)
		if err != nil {
			return nil, fmt.Errorf("after image %d: %w", row/2, err)
		}
		pos += n
		row++
		cols = append(cols, found...)
	}
	if pos != len(data) {
		return nil, fmt.Errorf("the row images end at byte %d of %d", pos, len(data))
	}
	for i := range cols {
		c := &cols[i]
		meta := int(tm.ColumnMeta[c.col])
		var err error
		if c.diffs, err = splitDiffs(data[c.start+meta : c.end]); err != nil {
			return nil, fmt.Errorf("column %d: %w", c.col, err)
		}
	}
	return cols, nil
}

// walkImage reads one row image at data[pos:] (Rows_log_event's layout,
// as go-mysql's decodeImage reads it) and returns its length; for an after
// image of a partial update (after), the columns logged as diffs.
func walkImage(tm *replication.TableMapEvent, data []byte, pos int, bitmap []byte, after bool, row *int) (int, []partialColumn, error) {
	start := pos
	var partialBits []byte
	if after {
		opts, _, n := mysql.LengthEncodedInt(data[pos:])
		pos += n
		if opts&uint64(replication.EnumBinlogRowValueOptionsPartialJsonUpdates) != 0 {
			size := (int(tm.JsonColumnCount()) + 7) / 8
			if pos+size > len(data) {
				return 0, nil, errors.New("the partial-column bitmap runs past the event")
			}
			partialBits = data[pos : pos+size]
			pos += size
		}
	}
	present := 0
	for i := 0; i < int(tm.ColumnCount); i++ {
		if bitSet(bitmap, i) {
			present++
		}
	}
	nulls := data[pos : pos+(present+7)/8]
	pos += (present + 7) / 8
	var found []partialColumn
	nullIdx, jsonIdx := 0, 0
	for i := 0; i < int(tm.ColumnCount); i++ {
		isPartial := false
		if tm.ColumnType[i] == mysql.MYSQL_TYPE_JSON {
			isPartial = partialBits != nil && bitSet(partialBits, jsonIdx)
			jsonIdx++
		}
		if !bitSet(bitmap, i) {
			continue
		}
		null := bitSet(nulls, nullIdx)
		nullIdx++
		if null {
			continue
		}
		n, err := valueLength(tm.ColumnType[i], tm.ColumnMeta[i], data[pos:])
		if err != nil {
			return 0, nil, fmt.Errorf("column %d: %w", i, err)
		}
		if pos+n > len(data) {
			return 0, nil, fmt.Errorf("column %d runs past the event", i)
		}
		if isPartial {
			found = append(found, partialColumn{row: *row, col: i, start: pos, end: pos + n})
		}
		pos += n
	}
	return pos - start, found, nil
}

func bitSet(bitmap []byte, i int) bool {
	return i>>3 < len(bitmap) && bitmap[i>>3]&(1<<(uint(i)&7)) != 0
}

// valueLength is the length of one column value in a row image, by the
// column's type and metadata: go-mysql's decodeValue (replication/
// row_event.go) and MySQL's log_event_print_value, without decoding it.
func valueLength(tp byte, meta uint16, data []byte) (int, error) {
	length := 0
	if tp == mysql.MYSQL_TYPE_STRING {
		if meta >= 256 {
			b0, b1 := uint8(meta>>8), uint8(meta&0xFF)
			if b0&0x30 != 0x30 {
				length = int(uint16(b1) | (uint16((b0&0x30)^0x30) << 4))
				tp = b0 | 0x30
			} else {
				length = int(meta & 0xFF)
				tp = b0
			}
		} else {
			length = int(meta)
		}
	}
	prefixed := func(bytes int) (int, error) {
		if len(data) < bytes {
			return 0, errors.New("length prefix runs past the event")
		}
		var l int
		for i := bytes - 1; i >= 0; i-- {
			l = l<<8 | int(data[i])
		}
		return bytes + l, nil
	}
	switch tp {
	case mysql.MYSQL_TYPE_NULL:
		return 0, nil
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_YEAR:
		return 1, nil
	case mysql.MYSQL_TYPE_SHORT:
		return 2, nil
	case mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_TIME:
		return 3, nil
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_TIMESTAMP:
		return 4, nil
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_DATETIME:
		return 8, nil
	case mysql.MYSQL_TYPE_NEWDECIMAL:
		return decimalLength(int(meta>>8), int(meta&0xFF)), nil
	case mysql.MYSQL_TYPE_BIT:
		nbits := int(meta>>8)*8 + int(meta&0xFF)
		return (nbits + 7) / 8, nil
	case mysql.MYSQL_TYPE_TIMESTAMP2:
		return 4 + int(meta+1)/2, nil
	case mysql.MYSQL_TYPE_DATETIME2:
		return 5 + int(meta+1)/2, nil
	case mysql.MYSQL_TYPE_TIME2:
		return 3 + int(meta+1)/2, nil
	case mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET:
		return int(meta & 0xFF), nil
	case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_VECTOR:
		if meta < 1 || meta > 4 {
			return 0, fmt.Errorf("a length of %d bytes", meta)
		}
		return prefixed(int(meta))
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		length = int(meta)
		fallthrough
	case mysql.MYSQL_TYPE_STRING:
		if length < 256 {
			return prefixed(1)
		}
		return prefixed(2)
	}
	return 0, fmt.Errorf("column type %d is not known to the partial JSON reader", tp)
}

// decimalLength is the size of a DECIMAL(precision, scale) in the binary
// format: 4 bytes per 9 digits, the rest packed.
func decimalLength(precision, scale int) int {
	packed := [...]int{0, 1, 1, 2, 2, 3, 3, 4, 4, 4}
	integral := precision - scale
	return integral/9*4 + packed[integral%9] + scale/9*4 + packed[scale%9]
}

// splitDiffs splits a column's diff list (Json_diff_vector::write_binary:
// per diff, the operation, the path's length and the path, then for all
// but a removal the value's length and the value in JSON binary).
func splitDiffs(b []byte) ([]rawDiff, error) {
	var out []rawDiff
	for pos := 0; pos < len(b); {
		start := pos
		op := replication.JsonDiffOperation(b[pos])
		if op > replication.JsonDiffOperationRemove {
			return nil, fmt.Errorf("unknown diff operation %d", op)
		}
		pos++
		l, _, n := mysql.LengthEncodedInt(b[pos:])
		pos += n
		if pos+int(l) > len(b) {
			return nil, errors.New("a diff's path runs past the column")
		}
		path := string(b[pos : pos+int(l)])
		pos += int(l)
		if op != replication.JsonDiffOperationRemove {
			l, _, n = mysql.LengthEncodedInt(b[pos:])
			pos += n + int(l)
			if pos > len(b) {
				return nil, errors.New("a diff's value runs past the column")
			}
		}
		out = append(out, rawDiff{op: op, path: path, raw: b[start:pos]})
	}
	if len(out) == 0 {
		return nil, errors.New("no diff")
	}
	return out, nil
}

// renderDiffValues has go-mysql render each diff's value as it renders
// every JSON value: the event decoded again with each partial column
// holding only its k-th diff, which go-mysql decodes whole.
func renderDiffValues(e *replication.RowsEvent, data []byte, pos int, cols []partialColumn) error {
	rounds := 0
	for _, c := range cols {
		rounds = max(rounds, len(c.diffs))
	}
	for k := 0; k < rounds; k++ {
		spliced := make([]byte, 0, len(data))
		last := 0
		for _, c := range cols {
			d := c.diffs[min(k, len(c.diffs)-1)]
			meta := int(e.Table.ColumnMeta[c.col])
			spliced = append(spliced, data[last:c.start]...)
			var lb [4]byte
			binary.LittleEndian.PutUint32(lb[:], uint32(len(d.raw)))
			spliced = append(spliced, lb[:meta]...)
			spliced = append(spliced, d.raw...)
			last = c.end
		}
		spliced = append(spliced, data[last:]...)
		again := *e
		if err := again.DecodeData(pos, spliced); err != nil {
			return fmt.Errorf("decoding diff %d: %w", k, err)
		}
		for i := range cols {
			c := &cols[i]
			if k >= len(c.diffs) || c.diffs[k].op == replication.JsonDiffOperationRemove {
				continue
			}
			d, ok := again.Rows[c.row][c.col].(*replication.JsonDiff)
			if !ok || d.Path != c.diffs[k].path {
				return fmt.Errorf("diff %d of column %d did not decode as itself", k, c.col)
			}
			c.diffs[k].value = d.Value
		}
	}
	return nil
}

// partialJSONError returns the error of a column the relay reads that a
// partial update left unresolved, nil when there is none.
func (l *layout) partialJSONError(values []any) error {
	for _, at := range l.idx {
		if at < len(values) {
			switch v := values[at].(type) {
			case *partialJSONError:
				return v
			case *replication.JsonDiff:
				return &partialJSONError{errors.New("the diff was not applied")}
			}
		}
	}
	return nil
}

package reconcile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/serverclock"
	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// finder looks message ids up in one outbox table, through the index on its
// message id column or, for a table without one (ids "schema.table:id"),
// its primary key.
type finder struct {
	t      *outbox.Table
	col    string // the column looked up
	prefix string // "schema.table:" when ids carry the table name
	intCol bool   // col is an integer: ids are passed as numbers
}

// orphans reads c's inbox rows in the window, range by range of its key,
// and reports the message ids no outbox table of c holds.
func (r *Reconciler) orphans(ctx context.Context, c *consumer, o Options, cr *ConsumerReport) error {
	finders, why, err := r.finders(ctx, c, o)
	if err != nil || why != "" {
		cr.Skipped = why
		return err
	}
	clk, err := serverclock.Read(ctx, c.db)
	if err != nil {
		return fmt.Errorf("reading the clock of consumer %s's server: %w", c.name, err)
	}
	sc := newInboxScan(c, r.cfg.ChunkSize, clk.DateTime(o.Since), clk.DateTime(o.Until))
	for {
		ids, ok, err := sc.next(ctx)
		if err != nil {
			return fmt.Errorf("reading inbox %s of consumer %s: %w", c.table, c.name, err)
		}
		if !ok {
			return nil
		}
		cr.InboxRows += int64(sc.read)
		for _, f := range finders {
			if len(ids) == 0 {
				break
			}
			found, err := f.find(ctx, r.replica, ids)
			if err != nil {
				return fmt.Errorf("looking message ids up in %s: %w", f.t.FullName(), err)
			}
			ids = subtract(ids, found)
		}
		for _, id := range ids {
			cr.Orphans.add(id, r.cfg.MaxIDs)
		}
	}
}

// finders prepares the lookups in every outbox table c gets; why says why
// they cannot be made.
func (r *Reconciler) finders(ctx context.Context, c *consumer, o Options) ([]*finder, string, error) {
	var finders []*finder
	for _, t := range c.tables {
		if !slices.Contains(o.Tables, t) {
			return nil, "the run leaves out " + t.FullName() + ", whose messages this consumer also gets", nil
		}
		f, why, err := r.newFinder(ctx, t)
		if err != nil || why != "" {
			return nil, why, err
		}
		finders = append(finders, f)
	}
	return finders, "", nil
}

// newFinder prepares the lookups in t; why says why t cannot be searched
// by message id.
func (r *Reconciler) newFinder(ctx context.Context, t *outbox.Table) (*finder, string, error) {
	f := &finder{t: t, col: t.Columns.MessageID}
	if f.col == "" {
		f.col, f.prefix = t.Columns.ID, t.FullName()+":"
	}
	var dataType string
	var indexed bool
	err := r.replica.QueryRowContext(ctx, `SELECT c.DATA_TYPE, EXISTS(SELECT 1 FROM information_schema.STATISTICS s
		WHERE s.TABLE_SCHEMA = c.TABLE_SCHEMA AND s.TABLE_NAME = c.TABLE_NAME AND s.COLUMN_NAME = c.COLUMN_NAME AND s.SEQ_IN_INDEX = 1)
		FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ? AND c.COLUMN_NAME = ?`,
		t.Schema, t.Name, f.col).Scan(&dataType, &indexed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Sprintf("%s has no column %s", t.FullName(), f.col), nil
	case err != nil:
		return nil, "", fmt.Errorf("reading the indexes of %s: %w", t.FullName(), err)
	case !indexed:
		return nil, fmt.Sprintf("%s has no index on its message id column %s (ALTER TABLE %s ADD INDEX (%s) makes the check possible)",
			t.FullName(), f.col, outboxsql.QuotedName(t), ident.Quote(f.col)), nil
	}
	f.intCol = strings.Contains(strings.ToLower(dataType), "int")
	return f, "", nil
}

// find returns which of ids (sorted) t holds, sorted: the message id the
// router gives each row it returns must be the inbox's, byte for byte.
func (f *finder) find(ctx context.Context, db *sql.DB, ids []string) ([]string, error) {
	var args []any
	for _, id := range ids {
		key, ok := strings.CutPrefix(id, f.prefix)
		if !ok {
			continue
		}
		if f.intCol {
			n, err := strconv.ParseUint(key, 10, 64)
			if err != nil {
				continue // not a number: no row of this table has it
			}
			args = append(args, n)
			continue
		}
		args = append(args, key)
	}
	if len(args) == 0 {
		return nil, nil
	}
	q, cols := outboxsql.LookupSQL(f.t, f.col, len(args))
	var found []string
	err := eachOutboxRow(ctx, db, f.t, q, args, cols, 0, func(row *outbox.Row, _ []any, _ bool) error {
		found = append(found, router.MessageID(row))
		return nil
	})
	slices.Sort(found)
	return found, err
}

// subtract returns the ids of a (sorted) not in b (sorted).
func subtract(a, b []string) []string {
	out := a[:0]
	j := 0
	for _, id := range a {
		for j < len(b) && b[j] < id {
			j++
		}
		if j < len(b) && b[j] == id {
			continue
		}
		out = append(out, id)
	}
	return out
}

// inboxScan reads a consumer's inbox rows recorded in the window, range by
// range of its key (the id column, or the message id of a dedup table).
type inboxScan struct {
	c            *consumer
	kr           *keyRanges
	size         int
	key, time    string // quoted columns; time is "" when the table has none
	since, until string
	read         int
}

func newInboxScan(c *consumer, size int, since, until string) *inboxScan {
	cols := c.layout.Columns
	key, timeCol := cols.ID, cols.FirstConsumeTime
	if !c.stateTable() {
		key, timeCol = cols.MessageID, cols.CreatedAt
	}
	sc := &inboxScan{c: c, size: size, key: ident.Quote(key), since: since, until: until}
	if timeCol != "" {
		sc.time = ident.Quote(timeCol)
	}
	// The ranges are drawn over every consumer's rows, so that no statement
	// examines more than a chunk of a table several consumers share.
	sc.kr = newKeyRanges(c.db, c.table, sc.key, size)
	return sc
}

// next returns the next range's message ids, sorted and distinct; false
// when the inbox is done.
func (sc *inboxScan) next(ctx context.Context) ([]string, bool, error) {
	ok, err := sc.kr.next(ctx)
	if err != nil || !ok {
		return nil, false, err
	}
	c := sc.c
	rangeCond, args := sc.kr.cond()
	conds := []string{rangeCond}
	if cond, cargs := c.consumerCond(); cond != "" {
		conds, args = append(conds, cond), append(args, cargs...)
	}
	if sc.time != "" {
		conds = append(conds, sc.time+" >= ? AND "+sc.time+" < ?")
		args = append(args, sc.since, sc.until)
	}
	q := "SELECT " + sc.key + ", " + ident.Quote(c.layout.Columns.MessageID) + " FROM " + c.table +
		" WHERE " + strings.Join(conds, " AND ") + " ORDER BY " + sc.key + " LIMIT ?"
	ids := make([]string, 0, sc.size)
	var k, id sql.RawBytes
	var last []byte
	var intKey bool
	sc.read = 0
	err = sqlrows.Each(ctx, c.db, q, append(args, sc.size), func(rs *sql.Rows, types []*sql.ColumnType) error {
		if err := rs.Scan(&k, &id); err != nil {
			return err
		}
		sc.read++
		ids = append(ids, string(id))
		last = append(last[:0], k...)
		intKey = sqlrows.IntType(types[0])
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if sc.read == sc.size {
		sc.kr.more(keyValue(string(last), intKey))
	}
	slices.Sort(ids)
	return slices.Compact(ids), true, nil
}

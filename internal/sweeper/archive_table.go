package sweeper

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// prepare reads, from the replica, what the archive needs: the outbox
// table's columns and the archive table's, which must hold them all. A
// missing archive table is a configuration error, reported at start.
func (s *Sweeper) prepare(ctx context.Context) error {
	if s.cfg.Archive.Mode != ArchiveMove {
		return nil
	}
	for _, p := range s.plans {
		if err := s.preparePlan(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// preparePlan reads what archiving one table needs.
func (s *Sweeper) preparePlan(ctx context.Context, p *plan) error {
	{
		archive := ArchiveTableName(s.cfg.Archive.Table, p.T.Name)
		var cols, archiveCols []string
		err := s.persist(ctx, func() error {
			var err error
			if cols, err = columns(ctx, s.replica, p.T.Schema, p.T.Name); err != nil {
				return err
			}
			archiveCols, err = columns(ctx, s.replica, p.T.Schema, archive)
			return err
		})
		if err != nil {
			return err
		}
		if len(archiveCols) == 0 {
			return fmt.Errorf("sweeper.archive.table: %s.%s does not exist; create it before archiving %s (for the seed table: schema/producer_message_archive.sql)",
				p.T.Schema, archive, p.T.FullName())
		}
		var missing []string
		for _, c := range cols {
			if !slices.ContainsFunc(archiveCols, func(a string) bool { return strings.EqualFold(a, c) }) {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("sweeper.archive.table: %s.%s lacks columns %v of %s", p.T.Schema, archive, missing, p.T.FullName())
		}
		p.ArchiveCols = cols
	}
	return nil
}

// columns lists a table's columns in order (none when it does not exist).
func columns(ctx context.Context, db *sql.DB, schema, table string) ([]string, error) {
	rs, err := db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, schema, table)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s.%s: %w", schema, table, err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var c string
		if err := rs.Scan(&c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rs.Err()
}

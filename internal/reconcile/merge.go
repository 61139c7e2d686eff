package reconcile

import (
	"context"
	"slices"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
)

// compare merges a chunk's SENT rows that c should have, sorted by message
// id, with c's inbox rows of those ids, sorted the same way.
func (s *scan) compare(ctx context.Context, c *consumer, rows []outRow) error {
	idx := make([]int, 0, len(rows))
	for i := range rows {
		if rows[i].class == classSent && c.wants(&rows[i]) {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(rows[a].msgID, rows[b].msgID) })
	ids := make([]string, 0, len(idx))
	for _, i := range idx {
		if n := len(ids); n == 0 || ids[n-1] != rows[i].msgID {
			ids = append(ids, rows[i].msgID)
		}
	}
	recs, err := c.lookup(ctx, ids)
	if err != nil {
		return err
	}
	pr := s.tr.pair(c.name)
	j := 0
	for k := 0; k < len(idx); {
		id := rows[idx[k]].msgID
		var v verdict
		// Records under an id not asked for (a case-insensitive collation
		// matching another spelling) are not this message's.
		for j < len(recs) && recs[j].msgID < id {
			j++
		}
		for ; j < len(recs) && recs[j].msgID == id; j++ {
			v.add(recs[j])
		}
		// Several outbox rows may share a message id (a message id column
		// without a unique index): each is judged on the same records.
		for ; k < len(idx) && rows[idx[k]].msgID == id; k++ {
			s.judge(pr, &rows[idx[k]], v)
		}
	}
	return nil
}

// judge records what the inbox says of one SENT row.
func (s *scan) judge(pr *PairReport, row *outRow, v verdict) {
	max := s.r.cfg.MaxIDs
	pr.Expected++
	if v.duplicate() {
		pr.Duplicates.add(row.msgID, max)
	}
	if v.recorded() {
		row.recorded++
	}
	switch {
	case v.processed:
		pr.Processed++
	case v.failed:
		pr.Failed.add(row.msgID, max)
	case v.busy:
		pr.Retrying++
	case row.recent:
		pr.InGrace++
	default:
		pr.Missing.add(row.msgID, max)
		row.missing++
	}
}

// repairChunk finds the chunk's rows that some consumer misses and none
// recorded, and with --repair resets them to pending on the primary.
func (s *scan) repairChunk(ctx context.Context, rows []outRow) error {
	rp, max := s.tr.Repair, s.r.cfg.MaxIDs
	var cand []int
	for i := range rows {
		if rows[i].missing > 0 {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 {
		return nil
	}
	if err := s.askOthers(ctx, rows, cand); err != nil {
		return err
	}
	var reset []sweeper.SentRow
	byID := map[string]string{}
	for _, i := range cand {
		row := &rows[i]
		if row.recorded > 0 {
			rp.Kept.add(row.msgID, max)
			continue
		}
		rp.Repairable.add(row.msgID, max)
		if s.repair {
			reset = append(reset, sweeper.SentRow{ID: row.id, Version: row.version})
			byID[colval.ValueString(row.id)] = row.msgID
		}
	}
	if len(reset) == 0 {
		return nil
	}
	done, err := sweeper.ResetSent(ctx, s.r.primary, s.t, reset, repairNote)
	for _, id := range done {
		rp.Reset.add(byID[colval.ValueString(id)], max)
	}
	if err != nil {
		return err
	}
	rp.Changed += int64(len(reset) - len(done))
	return nil
}

// askOthers looks the candidates up at the consumers of the table whose
// filter left them out: a message any consumer recorded is never sent
// again, whatever the filters say.
func (s *scan) askOthers(ctx context.Context, rows []outRow, cand []int) error {
	for _, c := range s.cons {
		var ask []string
		for _, i := range cand {
			if !c.wants(&rows[i]) {
				ask = append(ask, rows[i].msgID)
			}
		}
		if len(ask) == 0 {
			continue
		}
		slices.Sort(ask)
		recs, err := c.lookup(ctx, slices.Compact(ask))
		if err != nil {
			return err
		}
		for _, i := range cand {
			if _, found := slices.BinarySearchFunc(recs, rows[i].msgID, func(r record, id string) int {
				return strings.Compare(r.msgID, id)
			}); found && !c.wants(&rows[i]) {
				rows[i].recorded++
			}
		}
	}
	return nil
}

package sweeper

import (
	"context"
	"strings"
)

// lookBatch is how many tables one pre-check statement asks about. With
// many outbox tables (a pattern entry over a fleet of tenants) one
// statement per table per interval is what an idle relay would cost the
// replica: 1,000 tables at 2 s is 500 statements a second doing nothing.
// One statement asks about lookBatch tables at once (two EXISTS columns
// each, each an indexed probe), so 1,000 tables cost 10 statements per
// interval; the probes themselves are the same.
const lookBatch = 100

// lookResult is what one pre-check said about one table.
type lookResult struct {
	due, zombies bool
	err          error
}

// lookAll asks the replica about every plan of batch in one statement. If
// that fails (a table of the batch was just dropped, or any other error)
// each table is asked alone, so one table's error is its own.
func (s *Sweeper) lookAll(ctx context.Context, batch []*plan) []lookResult {
	out := make([]lookResult, len(batch))
	if len(batch) == 1 {
		due, zombies, err := s.look(ctx, batch[0])
		out[0] = lookResult{due, zombies, err}
		return out
	}
	var cols []string
	var args []any
	dest := make([]any, 0, 2*len(batch))
	for i, p := range batch {
		q, a := p.LookSQL(s.grace, s.cfg.ZombieTimeout)
		cols = append(cols, strings.TrimPrefix(q, "SELECT "))
		args = append(args, a...)
		dest = append(dest, &out[i].due, &out[i].zombies)
	}
	if err := s.precheck(ctx, "SELECT "+strings.Join(cols, ", "), args, dest...); err == nil {
		return out
	}
	for i, p := range batch {
		due, zombies, err := s.look(ctx, p)
		out[i] = lookResult{due, zombies, err}
	}
	return out
}

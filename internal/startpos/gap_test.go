package startpos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func tables() (status, debezium *outbox.Table) {
	status = &outbox.Table{Schema: "shop", Name: "producer_message"}
	status.Columns.Status = "status"
	debezium = &outbox.Table{Schema: "shop", Name: "outbox"}
	return status, debezium
}

func gaps(acceptGap, sweeper bool, tables ...*outbox.Table) *Gaps {
	return New(Config{Name: "orders", CheckpointKey: "orders:checkpoint", Tables: tables, SweeperEnabled: sweeper, AcceptGap: acceptGap}, Deps{})
}

// A gap is taken only when the sweeper covers it or the operator said so.
func TestGapRefusal(t *testing.T) {
	status, debezium := tables()
	var refused *GapRefusedError
	if err := gaps(false, true, status).Refusal("purged"); err != nil {
		t.Fatalf("status table, sweeper on: %v", err)
	}
	err := gaps(false, true, status, debezium).Refusal("purged")
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "shop.outbox") || !strings.Contains(err.Error(), "--accept-gap") ||
		strings.Contains(err.Error(), "shop.producer_message") {
		t.Fatalf("status-less table: %v", err)
	}
	err = gaps(false, false, status).Refusal("purged")
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "sweeper.enabled is false") {
		t.Fatalf("sweeper off: %v", err)
	}
	if err := gaps(true, false, status, debezium).Refusal("purged"); err != nil {
		t.Fatalf("--accept-gap: %v", err)
	}
}

// The policy over every case: refused, or taken and counted as covered by
// the sweeper or accepted as a loss.
func TestGapPolicy(t *testing.T) {
	status, debezium := tables()
	for _, c := range []struct {
		statusless, sweeper, accept bool
		refused                     string // in the refusal; "" when taken
		handling                    string
	}{
		{false, true, false, "", metrics.GapSweeper},
		{false, true, true, "", metrics.GapSweeper},
		{false, false, false, "sweeper.enabled is false", metrics.GapAccepted},
		{false, false, true, "", metrics.GapAccepted},
		{true, true, false, "tables without a status column (shop.outbox)", metrics.GapAccepted},
		{true, true, true, "", metrics.GapAccepted},
		{true, false, false, "tables without a status column (shop.outbox)", metrics.GapAccepted},
		{true, false, true, "", metrics.GapAccepted},
	} {
		name := fmt.Sprintf("statusless=%v sweeper=%v accept-gap=%v", c.statusless, c.sweeper, c.accept)
		ts := []*outbox.Table{status}
		if c.statusless {
			ts = append(ts, debezium)
		}
		g := gaps(c.accept, c.sweeper, ts...)
		err := g.Refusal("the position is gone")
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused) || !strings.HasPrefix(err.Error(), "the position is gone. ")):
			t.Errorf("%s: %v, want a refusal naming %q", name, err, c.refused)
		}
		if h := g.Handling(); h != c.handling {
			t.Errorf("%s: handling %q, want %q", name, h, c.handling)
		}
	}
}

type fakeSource struct {
	now binlog.Position
	err error
}

func (f fakeSource) Addr() string { return "db1:3306" }
func (f fakeSource) CurrentPosition(context.Context) (binlog.Position, error) {
	return f.now, f.err
}

const purgedMsg = "Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged."

// A purged position restarts at the source's current one when the policy
// allows it, counted and named on /readyz; otherwise it is refused, and
// another error 1236 is never answered by a jump.
func TestPurged(t *testing.T) {
	status, debezium := tables()
	saved := binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-5"}
	now := binlog.Position{Flavor: binlog.FlavorMariaDB, GTIDSet: "0-1-90"}
	purged := fmt.Errorf("%w: %s", binlog.ErrPositionPurged, purgedMsg)
	ctx := context.Background()
	newGaps := func(tables ...*outbox.Table) (*Gaps, *metrics.Metrics, *ops.Notice) {
		m, n := metrics.NewWith(metrics.Config{Name: "orders"}, zap.NewNop()), &ops.Notice{}
		return New(Config{Name: "orders", Tables: tables, SweeperEnabled: true},
			Deps{Source: fakeSource{now: now}, Metrics: func() *metrics.Metrics { return m }, Notice: n, Log: zap.NewNop()}), m, n
	}

	g, m, n := newGaps(status)
	p, err := g.Purged(ctx, saved, purged)
	if err != nil || p != now {
		t.Fatalf("covered gap: %v, %v", p, err)
	}
	if r := n.Reasons(); len(r) != 1 || !strings.Contains(r[0], "gap taken at ") || !strings.Contains(r[0], "source db1:3306") ||
		!strings.Contains(r[0], "the sweeper sends them") {
		t.Errorf("readyz after a gap taken: %q", r)
	}
	if got := gapsCounted(t, m, metrics.GapSweeper); got != 1 {
		t.Errorf("gaps_total{handling=sweeper} = %v, want 1", got)
	}

	g, m, n = newGaps(status, debezium)
	var refused *GapRefusedError
	if _, err := g.Purged(ctx, saved, purged); !errors.As(err, &refused) {
		t.Fatalf("gap losing rows: %v, want a refusal", err)
	}
	if r := n.Reasons(); r != nil || gapsCounted(t, m, metrics.GapAccepted) != 0 {
		t.Errorf("a refused gap was reported as taken: %q", r)
	}

	other := fmt.Errorf("%w: connecting slave requested to start from GTID 0-1-5, which is not in the master's binlog", binlog.ErrPositionPurged)
	if p, err := g.Purged(ctx, saved, other); err == nil || errors.As(err, &refused) || p != saved ||
		!strings.Contains(err.Error(), "and not because it was purged") {
		t.Errorf("error 1236 for another reason: %v, %v", p, err)
	}

	down := errors.New("source down")
	g = New(Config{Tables: []*outbox.Table{status}, SweeperEnabled: true}, Deps{Source: fakeSource{err: down}})
	if _, err := g.Purged(ctx, saved, purged); !errors.Is(err, down) || !errors.Is(err, binlog.ErrPositionPurged) {
		t.Errorf("current position unreadable: %v", err)
	}
}

// LostWhat names the checkpoint key, the relay and its marker.
func TestLostWhat(t *testing.T) {
	got := gaps(false, true).LostWhat("2024-05-01T10:00:00Z")
	want := `no checkpoint under orders:checkpoint, but relay "orders" saved one before (first at 2024-05-01T10:00:00Z; marker orders:checkpoint:first-saved): Redis lost it or it was deleted`
	if got != want {
		t.Errorf("LostWhat = %q, want %q", got, want)
	}
}

func gapsCounted(t *testing.T, m *metrics.Metrics, handling string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != metrics.Namespace+"_gaps_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "handling" && l.GetValue() == handling {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

package command

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/reconcile"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func ids(n int64) reconcile.IDs { return reconcile.IDs{Count: n} }

// status's reconcile line adds up each kind of difference over tables and
// consumers, and says when the run failed or repaired.
func TestReconcileSummary(t *testing.T) {
	full := &reconcile.Report{
		Differences: 21, Repair: true,
		Tables: []*reconcile.TableReport{
			{Table: "shop.outbox", Failed: ids(1), PendingStale: ids(2), Repair: &reconcile.RepairReport{Reset: ids(3)},
				Consumers: []*reconcile.PairReport{{Missing: ids(4), Duplicates: ids(1), Failed: ids(1)}, {Missing: ids(1)}}},
			{Table: "shop.events", Consumers: []*reconcile.PairReport{{Missing: ids(2), Duplicates: ids(2)}}},
		},
		Consumers: []*reconcile.ConsumerReport{{Orphans: ids(3)}, {Orphans: ids(1)}},
	}
	cases := []struct {
		name  string
		rep   *reconcile.Report
		want  string
		reset bool
	}{
		{"no differences", &reconcile.Report{}, "0 differences (missing 0, duplicates 0, failed 0, pending too long 0, processed without outbox row 0)", false},
		{"every kind, repaired", full, "21 differences (missing 7, duplicates 3, failed 2, pending too long 2, processed without outbox row 4); 3 rows reset to pending", true},
		{"failed part way", &reconcile.Report{Error: "inbox billing: timeout", Differences: 1, Tables: []*reconcile.TableReport{{Failed: ids(1)}}},
			"FAILED: inbox billing: timeout; 1 differences (missing 0, duplicates 0, failed 1, pending too long 0, processed without outbox row 0)", false},
		{"repair, nothing reset", &reconcile.Report{Repair: true, Tables: []*reconcile.TableReport{{Repair: &reconcile.RepairReport{Kept: ids(2)}}}},
			"0 differences (missing 0, duplicates 0, failed 0, pending too long 0, processed without outbox row 0); 0 rows reset to pending", false},
	}
	for _, c := range cases {
		if got := reconcileSummary(c.rep); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if got := anyReset(c.rep); got != c.reset {
			t.Errorf("%s: anyReset %v, want %v", c.name, got, c.reset)
		}
	}
}

// A --table the config does not have is refused before any inbox is
// connected to, with no report (cmd/binlog-relay's usage exit).
func TestReconcileUnknownTable(t *testing.T) {
	e := Env{Cfg: &config.Config{Tables: []*outbox.Table{table("shop", "outbox", true)}},
		NewReconciler: func() (*reconcile.Reconciler, func(), error) {
			t.Fatal("the inboxes were connected to")
			return nil, nil, nil
		}}
	rep, err := Reconcile(context.Background(), e, ReconcileOptions{Tables: []string{"shop.orders"}, Format: "table"}, io.Discard)
	if rep != nil || err == nil || !strings.HasPrefix(err.Error(), "reconcile: --table: ") {
		t.Errorf("got %v, %v", rep, err)
	}
}

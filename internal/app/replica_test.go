package app

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/sourceinfo"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func gapApp(t *testing.T, acceptGap bool, sweeper *bool, tables ...*outbox.Table) *App {
	t.Helper()
	cfg := &config.Config{Name: "orders", Tables: tables}
	cfg.Sweeper.Enabled = sweeper
	return &App{Cfg: cfg, AcceptGap: acceptGap}
}

// A gap is taken only when the sweeper covers it or the operator said so.
func TestGapRefusal(t *testing.T) {
	status := &outbox.Table{Schema: "shop", Name: "producer_message"}
	status.Columns.Status = "status"
	debezium := &outbox.Table{Schema: "shop", Name: "outbox"}
	off := false
	var refused *GapRefusedError
	if err := gapApp(t, false, nil, status).gapRefusal("purged"); err != nil {
		t.Fatalf("status table, sweeper on: %v", err)
	}
	err := gapApp(t, false, nil, status, debezium).gapRefusal("purged")
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "shop.outbox") || !strings.Contains(err.Error(), "--accept-gap") ||
		strings.Contains(err.Error(), "shop.producer_message") {
		t.Fatalf("status-less table: %v", err)
	}
	err = gapApp(t, false, &off, status).gapRefusal("purged")
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "sweeper.enabled is false") {
		t.Fatalf("sweeper off: %v", err)
	}
	if err := gapApp(t, true, &off, status, debezium).gapRefusal("purged"); err != nil {
		t.Fatalf("--accept-gap: %v", err)
	}
}

func TestPurgedMessage(t *testing.T) {
	for msg, want := range map[string]bool{
		"Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.": true,
		"Could not find first log file name in binary log index file":                                                                                       true,
		"Cannot replicate because the source purged required binary logs.":                                                                                  true,
		"A slave with the same server_uuid/server_id as this slave has connected to the master":                                                             false,
		"Error: connecting slave requested to start from GTID 0-1-5, which is not in the master's binlog":                                                   false,
	} {
		if sourceinfo.IsPurgedMessage(msg) != want {
			t.Errorf("IsPurgedMessage(%q) = %v", msg, !want)
		}
	}
	if !serverIDConflict(errors.New("ERROR 4052 (HY000): A slave with the same server_uuid/server_id is already connected")) ||
		!serverIDConflict(fmt.Errorf("x: %w", binlog.ErrServerIDConflict)) || serverIDConflict(binlog.ErrPositionPurged) {
		t.Error("serverIDConflict misclassifies")
	}
}

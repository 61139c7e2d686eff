package ops

import (
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The public packages' slog lines reach the relay's zap core under the
// logger's name, with their fields as zap fields (an error as its text) and
// the caller, like the relay's own lines.
func TestSlogLinesGoThroughZap(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	log := SlogOf(zap.New(core).Named("binlog"))
	log.Warn("binlog stream lost, reconnecting", "error", errors.New("connection reset"), "gtid", "0-1-42", "attempts", 3)
	log.Debug("below the level")
	entries := logs.All()
	if len(entries) != 1 {
		t.Fatalf("%d entries, want the warning only: %+v", len(entries), entries)
	}
	e := entries[0]
	fields := e.ContextMap()
	if e.LoggerName != "binlog" || e.Level != zapcore.WarnLevel || e.Message != "binlog stream lost, reconnecting" ||
		fields["error"] != "connection reset" || fields["gtid"] != "0-1-42" || fields["attempts"] != int64(3) {
		t.Fatalf("entry %+v with fields %v", e.Entry, fields)
	}
	if !e.Caller.Defined || e.Caller.Function == "" {
		t.Fatalf("no caller: %+v", e.Caller)
	}
}

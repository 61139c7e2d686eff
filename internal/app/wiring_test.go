package app

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Every header left out is counted; each table and header is warned about
// once, with the message id and the reason.
func TestHeaderOmittedCountedAndWarnedOnce(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	cfg := &config.Config{Name: "r"}
	a := &App{Cfg: cfg, Log: zap.New(core), Source: testSource(t, cfg)}
	a.wire = &wiring{cfg: cfg, log: a.Log, metrics: a.Metrics}
	tb := &outbox.Table{Schema: "shop", Name: "outbox"}
	for i := range 3 {
		a.wire.headerOmitted(tb, "m-"+strconv.Itoa(i), "traceparent", errors.New("traceparent \"x\": 1 characters"))
	}
	a.wire.headerOmitted(tb, "m-9", "tracestate", errors.New("bad tracestate"))
	lines := logs.FilterMessageSnippet("a header the table maps was left out").All()
	if len(lines) != 2 {
		t.Fatalf("%d warnings for 2 table/header pairs", len(lines))
	}
	if f := lines[0].ContextMap(); f["table"] != "shop.outbox" || f["header"] != "traceparent" || f["message_id"] != "m-0" ||
		!strings.Contains(f["error"].(string), "1 characters") {
		t.Errorf("warning fields: %v", f)
	}
	exp := `# HELP binlog_relay_headers_omitted_total Rows published without a header their table maps (trace, cloudevents) because the row's value does not fit it: header traceparent (not W3C trace context: traceparent and tracestate left out), tracestate (left out alone), ce-source or ce-type (no ce-* header at all), ce-time.
# TYPE binlog_relay_headers_omitted_total counter
binlog_relay_headers_omitted_total{header="traceparent",name="r",table="shop.outbox"} 3
binlog_relay_headers_omitted_total{header="tracestate",name="r",table="shop.outbox"} 1
`
	if err := testutil.GatherAndCompare(a.Metrics().Registry(), strings.NewReader(exp), "binlog_relay_headers_omitted_total"); err != nil {
		t.Error(err)
	}
}

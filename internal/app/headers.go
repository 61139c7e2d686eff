package app

// The router the binlog path and the sweeper share, and the warning about
// a header it leaves out.

import (
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// newRouter builds the router of the binlog path or the sweeper, reporting
// the trace context and CloudEvents headers it leaves out.
func (a *App) newRouter() (*router.Router, error) {
	return router.New(a.Cfg.Tables, router.WithAppID(a.Cfg.Name), router.WithHeaderProblem(a.headerOmitted))
}

// headerOmitted counts a mapped header left out of a message and warns once
// per table and header: a producer that writes a bad value writes it on
// every row, and one line says what to fix. The row itself is published.
func (a *App) headerOmitted(t *outbox.Table, messageID, header string, err error) {
	a.Metrics().HeaderOmitted(t.FullName(), header)
	if _, seen := a.headerWarned.LoadOrStore(t.FullName()+"\x00"+header, true); seen {
		return
	}
	a.Log.Warn("a header the table maps was left out of a message: the row's value does not fit it; the row is published without it (logged once per table and header; binlog_relay_headers_omitted_total counts every one)",
		zap.String("table", t.FullName()), zap.String("header", header), zap.String("message_id", messageID), zap.Error(err))
}

package app

// The server_id watch: another replica registered on the source with this
// relay's source.server_id, looked for after each replica poll.

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/replica"
)

// watchServerID looks, while the binlog stream is down, for another
// replica registered on the source with this relay's source.server_id: the
// source refuses or drops a second stream with one id (MariaDB: error 4052
// or 1236), so the reader would reconnect in vain. It is named on /readyz
// and logged; the reader keeps retrying from its position, never ahead.
func (a *App) watchServerID(ctx context.Context) {
	r := a.ops.reader.Load()
	if r == nil || r.Connected() || a.Cfg.Source.ServerID == 0 || !a.replica.Streaming() {
		return
	}
	others, err := a.serverIDs().Registered(ctx)
	if err != nil || len(others) == 0 {
		return
	}
	hint := a.serverIDs().Hint()
	a.notice.Set("binlog stream from "+a.sourceAddr()+" is refused: "+hint, 2*replica.PollEvery+time.Second)
	if a.conflictLogged.CompareAndSwap(false, true) {
		a.Log.Error("binlog stream refused by the source: another replica is connected with this relay's server_id. The reader retries from its position; nothing is skipped",
			zap.Uint32("server_id", a.Cfg.Source.ServerID), zap.Strings("registered_as", others), zap.String("fix", hint))
	}
}

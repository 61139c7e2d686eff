package binlog

import (
	"fmt"
	"slices"
	"strings"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// EmitVersion numbers the rules by which the reader decides which rows it
// emits before a position: which UPDATEs are re-queues, what a transaction
// past the buffer limits sends early, how a partial JSON update is
// rebuilt, and the like. Bump it with any change to those rules: a relay's
// publishing ids count emitted rows (internal/relay/seq.go), and a
// checkpoint's ids must not be resumed by a reader that would emit other
// rows before its position.
const EmitVersion = 1

// Numbering names every input, besides the binlog itself, that decides
// which rows the reader emits, and so the number each row takes: the emit
// rules' version, the transaction buffer limits of c (its defaults filled
// in), and per table its status column, publishable statuses and
// route.time_zone. Two readers with the same Numbering emit the same rows
// from the same binlog. Table order and the order of the publishable values
// do not matter.
func Numbering(c Config, tables []*outbox.Table) string {
	c.Defaults()
	parts := make([]string, 0, len(tables))
	for _, t := range tables {
		pub := make([]string, len(t.Statuses.Publishable))
		for i, v := range t.Statuses.Publishable {
			pub[i] = fmt.Sprintf("%q", v)
		}
		slices.Sort(pub)
		parts = append(parts, fmt.Sprintf("%s{status=%q publishable=[%s] time_zone=%q}",
			t.FullName(), t.Columns.Status, strings.Join(pub, ","), t.Route.TimeZone))
	}
	slices.Sort(parts)
	return fmt.Sprintf("emit=%d tx_buffer_rows=%d tx_buffer_bytes=%d tables=%s",
		EmitVersion, c.TxBufferRows, c.TxBufferBytes, strings.Join(parts, ";"))
}

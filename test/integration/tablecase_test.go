package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// With lower_case_table_names=0 (the Linux default of MySQL and MariaDB,
// the stack's setting) `Producer_Message` and `producer_message` are two
// tables: the relay publishes and marks the rows of the one it is
// configured with, and never the other's, whichever of the two it is; both
// configured, each one's rows are published once and marked in their own
// table.
func TestTablesDifferingOnlyByCaseAreTwoTables(t *testing.T) {
	testenv.Integration(t)
	for _, tc := range []struct {
		name       string
		configured []string
	}{
		{"lower case configured", []string{"producer_message"}},
		{"mixed case configured", []string{"Producer_Message"}},
		{"both configured", []string{"producer_message", "Producer_Message"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := testenv.NewDB(t, "schema/producer_message.sql")
			db.Exec(t, "CREATE TABLE `Producer_Message` LIKE producer_message")
			db.WaitReplicated(t, 30*time.Second) // the relay's start-up checks look for it on the replica
			br, got := testenv.NewCollectedBroker(t)
			var tables strings.Builder
			for _, name := range tc.configured {
				fmt.Fprintf(&tables, "  - {preset: producer-message, schema: %s, name: %s}\n", db.Name, name)
			}
			relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("case"), tables.String(), noSweeper))

			// Rows in both tables, interleaved, one transaction each.
			ids := map[string][]string{}
			for i := range 20 {
				for _, table := range []string{"producer_message", "Producer_Message"} {
					id := fmt.Sprintf("%s-%02d", table, i)
					db.Exec(t, "INSERT INTO `"+table+"` (message_id, exchange, routing_key, content) VALUES (?, ?, 'order.created', '{}')", id, br.Exchange)
					ids[table] = append(ids[table], id)
				}
			}
			var want []string
			for i := range 20 {
				for _, table := range []string{"producer_message", "Producer_Message"} {
					if slices.Contains(tc.configured, table) {
						want = append(want, ids[table][i])
					}
				}
			}
			waitDeliveredOnceInOrder(t, got, want, 30*time.Second)
			for _, table := range []string{"producer_message", "Producer_Message"} {
				wantSent := 0
				if slices.Contains(tc.configured, table) {
					wantSent = 20
				}
				testenv.WaitFor(t, 15*time.Second, table+"'s statuses", func() (bool, string) {
					sent := db.Count(t, "SELECT COUNT(*) FROM `"+table+"` WHERE status = 'SENT'")
					return sent == wantSent, fmt.Sprintf("%d SENT, want %d", sent, wantSent)
				})
			}
			// Whatever else was in flight arrives before a last row.
			db.Exec(t, "INSERT INTO `"+tc.configured[0]+"` (message_id, exchange, routing_key, content) VALUES ('last', ?, 'order.created', '{}')", br.Exchange)
			waitDeliveredOnceInOrder(t, got, append(want, "last"), 30*time.Second)
		})
	}
}

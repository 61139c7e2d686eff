package showrow_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/showrow"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// First gives the first row by column name, and an error naming a query
// that returns none.
func TestFirst(t *testing.T) {
	db := testenv.Primary(t)
	row, err := showrow.First(t.Context(), db, "SELECT 1 AS n, 'x' AS s, NULL AS none UNION ALL SELECT 2, 'y', 'z'")
	if want := map[string]string{"n": "1", "s": "x", "none": ""}; err != nil || !maps.Equal(row, want) {
		t.Errorf("First = %v, %v; want %v", row, err, want)
	}
	if row, err := showrow.First(t.Context(), db, "SHOW MASTER STATUS"); err != nil || row["File"] == "" {
		t.Errorf("SHOW MASTER STATUS: %v, %v; want a row with a File", row, err)
	}
	const none = "SELECT 1 FROM DUAL WHERE 0"
	if _, err := showrow.First(t.Context(), db, none); err == nil || !strings.Contains(err.Error(), none) {
		t.Errorf("no row: error %v, want one naming the query", err)
	}
}

// Package replica owns the source replica's health (SHOW REPLICA STATUS)
// and the relay's delay behind the primary, measured end to end (primary
// commit to the relay's checkpoint): a Watch polls both for the life of
// `run`, for /readyz, the metrics and the sweeper; PrintStatus is the
// `status` command's lines; State is what check reads. It reads the
// servers it is given (Servers) and knows nothing of the App.
package replica

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
)

// State is what SHOW SLAVE STATUS (SHOW REPLICA STATUS) said about
// the source. IsReplica is false when the relay reads a primary directly.
type State struct {
	Addr          string // the source, host:port
	IsReplica     bool
	Master        string // its primary, host:port
	IO, SQL       string // Slave_IO_Running, Slave_SQL_Running: Yes, No, Connecting
	IOError       string // Last_IO_Error
	SQLError      string // Last_SQL_Error
	SecondsBehind *int64 // Seconds_Behind_Master; nil when the server says NULL
	// Start is the statement this server takes to start replication:
	// START REPLICA where it names its columns Replica_* (MySQL 8.0.22+;
	// MySQL 9 has no START SLAVE), START SLAVE elsewhere (MariaDB, older
	// MySQL).
	Start string
}

// Running reports whether both threads run.
func (s State) Running() bool {
	return strings.EqualFold(s.IO, "Yes") && strings.EqualFold(s.SQL, "Yes")
}

// CaughtUp reports a replica with both threads running, no error and
// nothing left to apply (Seconds_Behind_Master 0).
func (s State) CaughtUp() bool {
	return s.IsReplica && s.Running() && s.IOError == "" && s.SQLError == "" && s.SecondsBehind != nil && *s.SecondsBehind == 0
}

// Threads describes the thread states and errors in one phrase.
func (s State) Threads() string {
	out := fmt.Sprintf("IO thread %s, SQL thread %s", s.IO, s.SQL)
	if s.IOError != "" {
		out += fmt.Sprintf(", Last_IO_Error: %s", s.IOError)
	}
	if s.SQLError != "" {
		out += fmt.Sprintf(", Last_SQL_Error: %s", s.SQLError)
	}
	return out
}

// Fix says what to do about stopped threads, in the statement the server
// takes.
func (s State) Fix() string {
	start := s.Start
	if start == "" {
		start = "START SLAVE"
	}
	if s.IOError != "" || s.SQLError != "" {
		return "fix the replication error on " + s.Addr + ", then " + start
	}
	return start + " on " + s.Addr
}

// ReadState reads SHOW REPLICA STATUS (MySQL 8.0.22+, MariaDB
// 10.5+), or SHOW SLAVE STATUS where the first is unknown (older MySQL;
// MySQL 9 knows only the first). Columns are read by name: MySQL 8.0.22+
// says Replica_IO_Running, Source_Host and Seconds_Behind_Source where
// MariaDB and older MySQL say Slave_IO_Running, Master_Host and
// Seconds_Behind_Master. addr names the server in State and errors.
func ReadState(ctx context.Context, db *sql.DB, addr string) (State, error) {
	st := State{Addr: addr, Start: "START SLAVE"}
	rows, err := db.QueryContext(ctx, "SHOW REPLICA STATUS")
	if err != nil {
		var err2 error
		if rows, err2 = db.QueryContext(ctx, "SHOW SLAVE STATUS"); err2 != nil {
			return st, fmt.Errorf("reading SHOW REPLICA STATUS on %s: %w", addr, err)
		}
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return st, err
	}
	if !rows.Next() {
		return st, rows.Err()
	}
	raw, err := sqlrows.ScanText(rows, len(cols))
	if err != nil {
		return st, fmt.Errorf("reading SHOW REPLICA STATUS on %s: %w", addr, err)
	}
	col := map[string]sql.NullString{}
	for i, c := range cols {
		col[c] = raw[i]
	}
	get := func(names ...string) sql.NullString {
		for _, n := range names {
			if v, ok := col[n]; ok {
				return v
			}
		}
		return sql.NullString{}
	}
	st.IsReplica = true
	if _, ok := col["Replica_IO_Running"]; ok {
		st.Start = "START REPLICA"
	}
	st.IO = get("Slave_IO_Running", "Replica_IO_Running").String
	st.SQL = get("Slave_SQL_Running", "Replica_SQL_Running").String
	st.IOError = get("Last_IO_Error").String
	st.SQLError = get("Last_SQL_Error").String
	if h := get("Master_Host", "Source_Host").String; h != "" {
		st.Master = h + ":" + get("Master_Port", "Source_Port").String
	}
	if v := get("Seconds_Behind_Master", "Seconds_Behind_Source"); v.Valid {
		if n, err := strconv.ParseInt(v.String, 10, 64); err == nil {
			st.SecondsBehind = &n
		}
	}
	return st, nil
}

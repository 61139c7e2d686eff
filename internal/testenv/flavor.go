package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/showrow"
)

// Flavor is one server set of the stack (scripts/stack.sh): a database
// server of one kind and version, with its seven servers (primary,
// replica, replica2, misconf, switch1-3), and the broker its tests use.
// The suites run once per flavour: RELAY_TEST_FLAVOR names it (make test
// runs each), and every address below follows it unless its own
// RELAY_TEST_*_DSN variable says otherwise.
type Flavor struct {
	Name     string // as stack.sh names it: mariadb-10.11, mysql-9.7, mariadb-11.8
	MySQL    bool   // MySQL (GTID sets, SHOW REPLICA STATUS) rather than MariaDB (GTID domains)
	BasePort int    // the primary's port; the other six follow it
	AMQPPort int    // the broker: RabbitMQ 3.10 on 5672, RabbitMQ 4.3 on 5673
	Broker   string // the broker's version, major.minor
}

// Flavors are the stack's flavours, the default first.
var Flavors = []Flavor{
	{Name: "mariadb-10.11", BasePort: 3307, AMQPPort: 5672, Broker: "3.10"},
	{Name: "mysql-9.7", MySQL: true, BasePort: 3317, AMQPPort: 5673, Broker: "4.3"},
	{Name: "mariadb-11.8", BasePort: 3327, AMQPPort: 5673, Broker: "4.3"},
}

// Current is the flavour this test binary runs on (RELAY_TEST_FLAVOR).
var Current = currentFlavor()

// currentFlavor reads RELAY_TEST_FLAVOR: a flavour's name, "mysql" or
// "mariadb" (the first of each kind), or nothing (the first flavour). Any
// other value stops the test binary: running the default flavour instead
// would skip every test of the one asked for without a word.
func currentFlavor() Flavor {
	name := Env("RELAY_TEST_FLAVOR", Flavors[0].Name)
	var names []string
	for _, f := range Flavors {
		if f.Name == name || (name == "mysql" && f.MySQL) || (name == "mariadb" && !f.MySQL) {
			return f
		}
		names = append(names, f.Name)
	}
	panic(fmt.Sprintf("testenv: RELAY_TEST_FLAVOR=%q is none of %s (or mysql, mariadb)", name, strings.Join(names, ", ")))
}

// dsn is the default DSN of one of the flavour's servers.
func (f Flavor) dsn(offset int) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/", f.BasePort+offset)
}

// String is the flavour's name.
func (f Flavor) String() string { return f.Name }

// Only skips the test unless it runs on a MySQL flavour (mysql) or a
// MariaDB one (!mysql), saying why.
func Only(t testing.TB, mysql bool, why string) {
	t.Helper()
	if Current.MySQL != mysql {
		t.Skipf("not on %s: %s", Current.Name, why)
	}
}

// GTIDVar is the variable holding what a server has logged: MariaDB's
// gtid_binlog_pos (one GTID per domain), MySQL's gtid_executed (a set).
func (f Flavor) GTIDVar() string {
	if f.MySQL {
		return "gtid_executed"
	}
	return "gtid_binlog_pos"
}

// GTIDPos reads what db has logged (GTIDVar).
func (f Flavor) GTIDPos(ctx context.Context, db *sql.DB) (string, error) {
	var pos string
	err := db.QueryRowContext(ctx, "SELECT @@"+f.GTIDVar()).Scan(&pos)
	return strings.ReplaceAll(pos, "\n", ""), err
}

// WaitApplied waits up to within for replica to have applied pos:
// MASTER_GTID_WAIT on MariaDB, WAIT_FOR_EXECUTED_GTID_SET on MySQL. Both
// return 0 once it has.
func (f Flavor) WaitApplied(ctx context.Context, replica *sql.DB, pos string, within time.Duration) error {
	q := "SELECT MASTER_GTID_WAIT(?, ?)"
	if f.MySQL {
		q = "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)"
	}
	var res sql.NullInt64
	if err := replica.QueryRowContext(ctx, q, pos, within.Seconds()).Scan(&res); err != nil {
		return err
	}
	if !res.Valid || res.Int64 != 0 {
		return fmt.Errorf("not applied within %s (result %v)", within, res)
	}
	return nil
}

// ReplicaStatus is SHOW REPLICA STATUS (SHOW SLAVE STATUS, which MySQL 9
// removed) by column, with MariaDB's column names for the ones tests read
// (Slave_IO_Running, Slave_SQL_Running, Relay_Master_Log_File,
// Seconds_Behind_Master, Master_Host, Master_Port) also under MySQL's
// (Replica_IO_Running, ...), so a test reads either on both. Empty when
// the server replicates from nothing.
func (f Flavor) ReplicaStatus(ctx context.Context, db *sql.DB) (map[string]string, error) {
	q := "SHOW SLAVE STATUS"
	if f.MySQL {
		q = "SHOW REPLICA STATUS"
	}
	row, err := showrow.First(ctx, db, q)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	for maria, my := range map[string]string{
		"Slave_IO_Running": "Replica_IO_Running", "Slave_SQL_Running": "Replica_SQL_Running",
		"Relay_Master_Log_File": "Relay_Source_Log_File", "Seconds_Behind_Master": "Seconds_Behind_Source",
		"Master_Host": "Source_Host", "Master_Port": "Source_Port",
	} {
		if v, ok := row[my]; ok {
			row[maria] = v
		} else if v, ok := row[maria]; ok {
			row[my] = v
		}
	}
	return row, nil
}

// BinlogStatusSQL is the statement that shows the file the server writes:
// SHOW BINARY LOG STATUS on MySQL (8.2 and later; 9 removed SHOW MASTER
// STATUS), SHOW MASTER STATUS on MariaDB.
func (f Flavor) BinlogStatusSQL() string {
	if f.MySQL {
		return "SHOW BINARY LOG STATUS"
	}
	return "SHOW MASTER STATUS"
}

// ChangeSourceSQL points a replica at the server on port by GTID:
// MariaDB's CHANGE MASTER ... MASTER_USE_GTID=current_pos, MySQL's CHANGE
// REPLICATION SOURCE ... SOURCE_AUTO_POSITION=1 (with the source's RSA key
// fetched: repl is a caching_sha2_password user and the link has no TLS).
func (f Flavor) ChangeSourceSQL(port int) string {
	if f.MySQL {
		return fmt.Sprintf("CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT=%d, SOURCE_USER='repl', SOURCE_PASSWORD='repl', SOURCE_CONNECT_RETRY=1, SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1", port)
	}
	return fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=current_pos", port)
}

// ResetBinlogSQL empties a server's binary logs and GTID state: MySQL 9's
// RESET BINARY LOGS AND GTIDS (RESET MASTER is gone), MariaDB's RESET
// MASTER (gtid_slave_pos is cleared apart).
func (f Flavor) ResetBinlogSQL() []string {
	if f.MySQL {
		return []string{"RESET BINARY LOGS AND GTIDS"}
	}
	return []string{"RESET MASTER", "SET GLOBAL gtid_slave_pos = ''"}
}

// StartReplicaSQL and its kin are the statements both flavours accept
// (MariaDB 10.5+ knows REPLICA; MySQL 9 no longer knows SLAVE).
const (
	StartReplicaSQL = "START REPLICA"
	StopReplicaSQL  = "STOP REPLICA"
	ResetReplicaSQL = "RESET REPLICA ALL"
)

// ReplicaHostsSQL lists the replicas registered on a server, the server
// id first: SHOW REPLICAS on MySQL (9 removed SHOW SLAVE HOSTS), SHOW
// SLAVE HOSTS on MariaDB.
func (f Flavor) ReplicaHostsSQL() string {
	if f.MySQL {
		return "SHOW REPLICAS"
	}
	return "SHOW SLAVE HOSTS"
}

package integration

import (
	"log"
	"os"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// binlogFlavor is the reader's flavour for the stack's flavour.
func binlogFlavor() string {
	if testenv.Current.MySQL {
		return binlog.FlavorMySQL
	}
	return binlog.FlavorMariaDB
}

// Parallel tests: a test calls t.Parallel() only when it shares no server
// state with any other parallel test: its own database, exchange, queue,
// relay name and proxies; no server stopped, restarted or reconfigured, no
// binlog purge, no t.Setenv, no global counter asserted on. Go runs them
// together (two at a time, GOMAXPROCS) after every serial test of the
// package has finished, so they never overlap a test that stops the broker
// or kills a server. The ones chosen are those that mostly wait (a steady
// state, an outage window, a hold), where running two at once halves the
// wall time on a 2-core machine without loading it.

// TestMain purges, once the package's tests are over, the binary logs the
// run left on the stack (testenv.PurgeBinlogs' rules): the stack keeps its
// data in memory, and the long tests' own purges leave what came after them.
func TestMain(m *testing.M) {
	code := m.Run()
	if !testing.Short() {
		testenv.PurgeBinlogsNow(log.Printf)
	}
	os.Exit(code)
}

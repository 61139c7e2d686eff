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

package integration

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// `status` exits 0 when every server it needs answers, and 1, naming the
// server, when the source replica does not (it used to print the error on
// stdout and exit 0, so a script or a probe saw a healthy relay).
func TestStatusExitsOneWhenTheSourceIsUnreachable(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/producer_message.sql")
	px := testenv.Proxy(t, testenv.Addr(testenv.ReplicaDSN))
	cfg := relaytest.WriteConfig(t, viaProxy(t, relaytest.RelayConfig(testenv.UniqueName("status"), relaytest.SeedTable(db.Name), noSweeper), px))
	bin := relaytest.Binary(t)
	status := func() (int, string) {
		t.Helper()
		out, err := exec.Command(bin, "status", "--config", cfg).CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &exit):
			return exit.ExitCode(), string(out)
		}
		t.Fatalf("status: %v", err)
		return 0, ""
	}
	if code, out := status(); code != 0 {
		t.Fatalf("status with every server up: exit %d\n%s", code, out)
	}
	px.Cut()
	code, out := status()
	if code != 1 || !strings.Contains(out, "binlog-relay: status:") || !strings.Contains(out, "source") {
		t.Fatalf("status with the source unreachable: exit %d\n%s\nwant exit 1 and a line naming the source", code, out)
	}
}

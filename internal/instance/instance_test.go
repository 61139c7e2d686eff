package instance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// A heartbeat left by a relay that died on this host is taken over at once;
// one of a live process, or of another host, is not.
func TestLeftByDeadProcess(t *testing.T) {
	host, _ := os.Hostname()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mine := fmt.Sprintf("%s/pid %d/0000beef", host, os.Getpid())
	liveInstances.Store(mine, true)
	defer liveInstances.Delete(mine)
	for instance, want := range map[string]bool{
		mine: false, // another relay running in this process
		fmt.Sprintf("%s/pid %d/0000abcd", host, os.Getpid()):       true, // a restarted container: pid 1 again
		fmt.Sprintf("%s/pid %d/0000abcd", host, dead.Process.Pid):  true,
		fmt.Sprintf("%s/pid %d/0000abcd", host, os.Getppid()):      false, // alive
		fmt.Sprintf("%s-other/pid %d/0000abcd", host, os.Getpid()): false, // another host: cannot tell
		fmt.Sprintf("%s/pid x/0000abcd", host):                     false,
		fmt.Sprintf("%s/pid -3/0000abcd", host):                    false,
		fmt.Sprintf("%s/%d/0000abcd", host, dead.Process.Pid):      false, // no "pid "
		fmt.Sprintf("%s/pid %d", host, dead.Process.Pid):           false, // two parts
		"garbage": false,
		"":        false,
	} {
		if got := leftByDeadProcess(instance); got != want {
			t.Errorf("leftByDeadProcess(%q) = %v, want %v", instance, got, want)
		}
	}
}

// This process's own heartbeat value is in instanceID's form, which
// leftByDeadProcess reads: live while a relay of this process holds it.
func TestInstanceIDIsReadBack(t *testing.T) {
	id := instanceID()
	liveInstances.Store(id, true)
	if leftByDeadProcess(id) {
		t.Errorf("%q of a live relay taken for a dead one", id)
	}
	liveInstances.Delete(id)
	if !leftByDeadProcess(id) {
		t.Errorf("%q of no live relay of this process not taken for a dead one", id)
	}
}

func TestIsServerIDConflict(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.New("ERROR 4052 (HY000): A slave with the same server_uuid/server_id is already connected"), true},
		{fmt.Errorf("x: %w", binlog.ErrServerIDConflict), true},
		{fmt.Errorf("%w: A slave with the same server_uuid/server_id as this slave has connected to the master", binlog.ErrPositionPurged), true},
		{binlog.ErrPositionPurged, false},
		{errors.New("connection refused"), false},
		{nil, false},
	} {
		if got := IsServerIDConflict(c.err); got != c.want {
			t.Errorf("IsServerIDConflict(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

type fakeSource struct{ addr string }

func (f fakeSource) DB() *sql.DB                            { return nil }
func (f fakeSource) Addr() string                           { return f.addr }
func (f fakeSource) Flavor(context.Context) (string, error) { return binlog.FlavorMariaDB, nil }

// The hint names the source read now and the id; a random id per start
// (0) never conflicts, so the source is not asked.
func TestServerIDsWithoutTheSource(t *testing.T) {
	s := NewServerIDs(Config{ServerID: 7}, nil, fakeSource{addr: "db2:3306"}, zap.NewNop())
	if h := s.Hint(); !strings.Contains(h, "source db2:3306 uses source.server_id 7") {
		t.Errorf("hint: %s", h)
	}
	others, err := NewServerIDs(Config{}, nil, fakeSource{}, zap.NewNop()).Registered(context.Background())
	if err != nil || others != nil {
		t.Errorf("server_id 0: %v, %v", others, err)
	}
}

// With ha.enabled the lease decides: no heartbeat is claimed, refreshed or
// read.
func TestHeartbeatUnderHA(t *testing.T) {
	h := NewHeartbeat(Config{Name: "orders", HA: true}, nil, nil, zap.NewNop())
	ctx := context.Background()
	if err := h.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if other, ok := h.Other(ctx); ok {
		t.Errorf("other relay %q under ha", other)
	}
	h.Release()
}

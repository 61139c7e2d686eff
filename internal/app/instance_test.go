package app

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
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
		"garbage":                                                  false,
	} {
		if got := leftByDeadProcess(instance); got != want {
			t.Errorf("leftByDeadProcess(%q) = %v, want %v", instance, got, want)
		}
	}
}

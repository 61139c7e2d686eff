// Package deploy tests what users deploy with: the Helm chart, the Compose demo and
// the release configuration. Tools are the versions the Makefile pins (HELM, GORELEASER),
// built with go run: minutes the first time on a machine, cached after. Tests that need
// them are skipped under -short.
package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// goBin is the go command that runs this test.
func goBin() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// pinnedTool returns the command line the Makefile gives a tool ("HELM ?= $(GO) run
// helm.sh/helm/v3/cmd/helm@v3.22.0"), so the test runs exactly what `make chart` runs.
func pinnedTool(t *testing.T, makeVar string) []string {
	t.Helper()
	raw, err := os.ReadFile(testenv.RepoPath("Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + makeVar + ` \?= \$\(GO\) run (\S+@v\S+)$`).FindSubmatch(raw)
	if m == nil {
		t.Fatalf("Makefile: no line %q", makeVar+" ?= $(GO) run module/cmd@vX.Y.Z")
	}
	return []string{goBin(), "run", string(m[1])}
}

// tool runs a pinned tool in the repository root and returns its stdout and stderr.
func tool(t *testing.T, makeVar string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s is built with go run (minutes on a fresh machine): skipped under -short", makeVar)
	}
	cmdline := append(pinnedTool(t, makeVar), args...)
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Dir = testenv.RepoPath("")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// mustTool is tool that fails the test on a non-zero exit.
func mustTool(t *testing.T, makeVar string, args ...string) string {
	t.Helper()
	out, errb, err := tool(t, makeVar, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", makeVar, strings.Join(args, " "), err, out, errb)
	}
	return out
}

package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// scripts/apidiff.sh, as make test runs it, passes a compatible change and
// fails an incompatible one, naming it: here against a scratch tag in a
// clone of the repository, with one exported function of pkg/router renamed
// and one of pkg/outbox added.
func TestAPIDiffCatchesAnIncompatibleChange(t *testing.T) {
	if testing.Short() {
		t.Skip("builds golang.org/x/exp's apidiff: skipped under -short")
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@localhost", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@localhost")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out, err := exec.Command("git", "clone", "-q", testenv.RepoPath(""), dir).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	// The working tree's own pkg/ (what is being tested may not be committed yet).
	for _, p := range []string{"pkg", "scripts/apidiff.sh", "go.mod", "go.sum"} {
		if out, err := exec.Command("rm", "-rf", filepath.Join(dir, p)).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		if out, err := exec.Command("cp", "-r", testenv.RepoPath(p), filepath.Join(dir, p)).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	git("add", "-A")
	git("commit", "-q", "--allow-empty", "-m", "base")
	git("tag", "v9.9.9-apidiff-test")

	run := func() (string, error) {
		cmd := exec.Command("bash", "scripts/apidiff.sh")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(); err != nil || !strings.Contains(out, "no incompatible change since v9.9.9-apidiff-test") {
		t.Fatalf("unchanged API: %v\n%s", err, out)
	}

	edit := func(path, old, new string) {
		t.Helper()
		p := filepath.Join(dir, path)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), old) {
			t.Fatalf("%s has no %q", path, old)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// An addition is compatible.
	edit("pkg/outbox/row.go", "package outbox\n", "package outbox\n\n// Added is new API.\nconst Added = 1\n")
	if out, err := run(); err != nil {
		t.Fatalf("an added constant was refused: %v\n%s", err, out)
	}
	// A rename is not.
	edit("pkg/router/router.go", "func WithAppID(", "func WithApplicationID(")
	out, err := run()
	if err == nil || !strings.Contains(out, "pkg/router: incompatible with v9.9.9-apidiff-test") || !strings.Contains(out, "WithAppID: removed") {
		t.Fatalf("a removed function passed: %v\n%s", err, out)
	}
}

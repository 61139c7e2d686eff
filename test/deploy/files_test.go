package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// pkg.go.dev shows a module's docs only with a license it recognises: the whole
// Apache-2.0 text, not a reference to it.
func TestLicenseIsApache2(t *testing.T) {
	raw, err := os.ReadFile(testenv.RepoPath("LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
		"9. Accepting Warranty or Additional Liability.", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(text, want) {
			t.Errorf("LICENSE lacks %q", want)
		}
	}
	if n := strings.Count(text, "\n"); n < 190 {
		t.Errorf("LICENSE has %d lines: want the full text (202)", n)
	}
}

// Keep a Changelog: an Unreleased section first, versions as "## [X.Y.Z] - YYYY-MM-DD",
// change types from its list, and a link for each version heading.
func TestChangelogFormat(t *testing.T) {
	raw, err := os.ReadFile(testenv.RepoPath("CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	heads := regexp.MustCompile(`(?m)^## (.*)$`).FindAllStringSubmatch(text, -1)
	if len(heads) == 0 || heads[0][1] != "[Unreleased]" {
		t.Fatalf("the first section must be ## [Unreleased], got %v", heads)
	}
	version := regexp.MustCompile(`^\[(\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?)\] - \d{4}-\d{2}-\d{2}$`)
	for _, h := range heads[1:] {
		m := version.FindStringSubmatch(h[1])
		if m == nil {
			t.Errorf("heading %q: want [X.Y.Z] - YYYY-MM-DD", h[1])
			continue
		}
		if !strings.Contains(text, "\n["+m[1]+"]: ") {
			t.Errorf("version %s has no link reference", m[1])
		}
	}
	for _, h := range regexp.MustCompile(`(?m)^### (.*)$`).FindAllStringSubmatch(text, -1) {
		switch h[1] {
		case "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security":
		default:
			t.Errorf("### %s is not a Keep a Changelog change type", h[1])
		}
	}
	if !strings.Contains(text, "\n[Unreleased]: ") {
		t.Error("no link reference for [Unreleased]")
	}
}

// The build context leaves out .git and the build output, and keeps every package the
// images compile (the relay, and the Compose demo's programs).
func TestDockerignore(t *testing.T) {
	raw, err := os.ReadFile(testenv.RepoPath(".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, want := range []string{".git", "bin", "dist"} {
		if !ignored(patterns, want) {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
	cmd := exec.Command(goBin(), "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}",
		"./cmd/binlog-relay", "./examples/order-inventory/cmd/...")
	cmd.Dir = testenv.RepoPath("")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root := filepath.Clean(testenv.RepoPath(""))
	needed := []string{"go.mod", "go.sum"}
	for _, dir := range strings.Fields(string(out)) {
		if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
			needed = append(needed, filepath.ToSlash(rel)+"/x.go")
		}
	}
	if len(needed) < 5 {
		t.Fatalf("go list found only %v", needed)
	}
	for _, p := range needed {
		if ignored(patterns, p) {
			t.Errorf(".dockerignore leaves out %s, which the image build compiles", p)
		}
	}
}

// ignored applies .dockerignore patterns as Docker does for the forms used here: a path
// and everything under it, and "**/" for any directory depth. The last match wins; "!"
// re-includes.
func ignored(patterns []string, path string) bool {
	out := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		if matches(p, path) {
			out = !neg
		}
	}
	return out
}

func matches(pattern, path string) bool {
	parts := strings.Split(path, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		if ok, _ := filepath.Match(pattern, prefix); ok {
			return true
		}
		if rest, found := strings.CutPrefix(pattern, "**/"); found {
			if ok, _ := filepath.Match(rest, parts[i]); ok {
				return true
			}
		}
	}
	return false
}

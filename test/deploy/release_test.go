package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

func TestGoreleaserCheck(t *testing.T) {
	_, errb := mustTool2(t, "GORELEASER", "check")
	if !strings.Contains(errb, "1 configuration file(s) validated") {
		t.Fatalf("goreleaser check:\n%s", errb)
	}
}

// What a release is made of: the platforms, the checksums, the image, the stamped version.
func TestGoreleaserConfig(t *testing.T) {
	var cfg struct {
		Builds []struct {
			Main    string   `yaml:"main"`
			Goos    []string `yaml:"goos"`
			Goarch  []string `yaml:"goarch"`
			Ldflags []string `yaml:"ldflags"`
		} `yaml:"builds"`
		Archives []struct {
			Files []string `yaml:"files"`
		} `yaml:"archives"`
		Checksum  map[string]string `yaml:"checksum"`
		DockersV2 []struct {
			Dockerfile string   `yaml:"dockerfile"`
			Images     []string `yaml:"images"`
			Platforms  []string `yaml:"platforms"`
		} `yaml:"dockers_v2"`
	}
	raw, err := os.ReadFile(testenv.RepoPath(".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Builds) != 1 || cfg.Builds[0].Main != "./cmd/binlog-relay" {
		t.Fatalf("builds %+v: want one, of ./cmd/binlog-relay", cfg.Builds)
	}
	b := cfg.Builds[0]
	for _, want := range [][2]string{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}} {
		if !slices.Contains(b.Goos, want[0]) || !slices.Contains(b.Goarch, want[1]) {
			t.Errorf("no %s/%s build (goos %v, goarch %v)", want[0], want[1], b.Goos, b.Goarch)
		}
	}
	if ld := strings.Join(b.Ldflags, " "); !strings.Contains(ld, "-X main.version=") || !strings.Contains(ld, "-X main.commit=") {
		t.Errorf("ldflags %q: want main.version and main.commit stamped", ld)
	}
	if cfg.Checksum["name_template"] == "" {
		t.Errorf("checksum %v: want a checksums file", cfg.Checksum)
	}
	for _, a := range cfg.Archives {
		for _, f := range a.Files {
			if m, _ := filepath.Glob(testenv.RepoPath(f)); len(m) == 0 {
				t.Errorf("archive file %s: nothing matches", f)
			}
		}
	}
	if len(cfg.DockersV2) != 1 {
		t.Fatalf("dockers_v2 %+v: want one image", cfg.DockersV2)
	}
	d := cfg.DockersV2[0]
	if !slices.Contains(d.Platforms, "linux/amd64") || !slices.Contains(d.Platforms, "linux/arm64") || len(d.Images) == 0 {
		t.Errorf("image %+v: want linux/amd64 and linux/arm64", d)
	}
	df, err := os.ReadFile(testenv.RepoPath(d.Dockerfile))
	if err != nil {
		t.Fatalf("the release Dockerfile: %v", err)
	}
	// dockers_v2 puts each platform's binary under <os>/<arch>/ in the build context.
	if !strings.Contains(string(df), "COPY ${TARGETPLATFORM}/binlog-relay ") {
		t.Errorf("%s does not copy the platform's binary:\n%s", d.Dockerfile, df)
	}
}

// Every way of building stamps what `binlog-relay version` prints: the Makefile, the
// Dockerfile's go build (the line itself, run outside Docker) and goreleaser.
func TestVersionStamped(t *testing.T) {
	dir := t.TempDir()
	const version, commit = "v9.8.7-test", "abc1234"
	want := "binlog-relay " + version + " (commit " + commit + ")\n"
	versionOf := func(t *testing.T, bin string) string {
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s version: %v\n%s", bin, err, out)
		}
		return string(out)
	}
	// buildStamped runs a build in the repository and checks the version
	// the binary it wrote prints.
	buildStamped := func(t *testing.T, cmd *exec.Cmd, bin string) {
		t.Helper()
		cmd.Dir = testenv.RepoPath("")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%q: %v\n%s", cmd.Args, err, out)
		}
		if got := versionOf(t, bin); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}

	t.Run("Makefile", func(t *testing.T) {
		bin := filepath.Join(dir, "make", "binlog-relay")
		buildStamped(t, exec.Command("make", "-s", "build", "BIN="+bin, "VERSION="+version, "COMMIT="+commit), bin)
	})

	t.Run("Dockerfile", func(t *testing.T) {
		raw, err := os.ReadFile(testenv.RepoPath("Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		for _, arg := range []string{"VERSION", "COMMIT"} {
			if !regexp.MustCompile(`(?m)^ARG ` + arg + `(=|$)`).Match(raw) {
				t.Errorf("Dockerfile: no ARG %s", arg)
			}
		}
		m := regexp.MustCompile(`(?m)^RUN .*go build .*-ldflags "([^"]+)".* (\./cmd/binlog-relay)$`).FindSubmatch(raw)
		if m == nil {
			t.Fatal(`Dockerfile: no RUN ... go build ... -ldflags "..." ... ./cmd/binlog-relay line`)
		}
		ldflags := os.Expand(string(m[1]), func(k string) string {
			return map[string]string{"VERSION": version, "COMMIT": commit}[k]
		})
		bin := filepath.Join(dir, "docker", "binlog-relay")
		cmd := exec.Command(goBin(), "build", "-trimpath", "-ldflags", ldflags, "-o", bin, string(m[2]))
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		buildStamped(t, cmd, bin)
	})

	t.Run("goreleaser", func(t *testing.T) {
		// A snapshot build of this platform, into a dist of the test's own. goreleaser
		// reads the commit from git, and the remote URL too: a checkout without a remote
		// gets one through git's environment config.
		raw, err := os.ReadFile(testenv.RepoPath(".goreleaser.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		dist := filepath.Join(dir, "dist")
		cfgPath := filepath.Join(dir, "goreleaser.yaml")
		if err := os.WriteFile(cfgPath, append(raw, []byte("\ndist: "+dist+"\n")...), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("GIT_CONFIG_COUNT", "1")
		t.Setenv("GIT_CONFIG_KEY_0", "remote.origin.url")
		t.Setenv("GIT_CONFIG_VALUE_0", "https://github.com/binlog-relay/binlog-relay.git")
		mustTool2(t, "GORELEASER", "build", "--snapshot", "--single-target", "--clean", "-f", cfgPath)
		bins, _ := filepath.Glob(filepath.Join(dist, "*", "binlog-relay"))
		if len(bins) != 1 {
			t.Fatalf("goreleaser built %v, want one binlog-relay", bins)
		}
		head, err := exec.Command("git", "-C", testenv.RepoPath(""), "rev-parse", "--short", "HEAD").Output()
		if err != nil {
			t.Fatal(err)
		}
		got := versionOf(t, bins[0])
		if !regexp.MustCompile(`^binlog-relay \d+\.\d+\.\d+-next \(commit ` + strings.TrimSpace(string(head)) + `\)\n$`).MatchString(got) {
			t.Errorf("got %q, want the snapshot version and commit %s", got, head)
		}
	})
}

// mustTool2 is mustTool returning stderr too (goreleaser logs there).
func mustTool2(t *testing.T, makeVar string, args ...string) (stdout, stderr string) {
	t.Helper()
	out, errb, err := tool(t, makeVar, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", makeVar, strings.Join(args, " "), err, out, errb)
	}
	return out, errb
}

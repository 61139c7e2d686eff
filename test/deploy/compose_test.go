package deploy

import (
	"bytes"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// composeFile is docker-compose.yml, decoded strictly over the keys it uses.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Environment map[string]string `yaml:"environment"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
	Restart string `yaml:"restart"`
}

type composeBuild struct {
	Context    string            `yaml:"context"`
	Dockerfile string            `yaml:"dockerfile"`
	Args       map[string]string `yaml:"args"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(testenv.RepoPath("docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	// Compose reads $VAR and ${VAR...}; a shell's $ must be written $$.
	for i := 0; i < len(raw); i++ {
		if raw[i] != '$' {
			continue
		}
		if i+1 < len(raw) && raw[i+1] == '$' {
			i++
			continue
		}
		if i+1 == len(raw) || !regexp.MustCompile(`^[{A-Za-z_]`).Match(raw[i+1:i+2]) {
			t.Errorf("docker-compose.yml: %q: write a shell's $ as $$", raw[i:min(i+8, len(raw))])
		}
	}
	for _, m := range regexp.MustCompile(`(^|[^$])\$\{([A-Za-z_]+)([^}]*)\}`).FindAllSubmatch(raw, -1) {
		if !strings.HasPrefix(string(m[3]), ":-") {
			t.Errorf("docker-compose.yml: ${%s} has no default: docker compose up would need it set", m[2])
		}
	}
	var c composeFile
	d := yaml.NewDecoder(bytes.NewReader(raw))
	d.KnownFields(true)
	if err := d.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// The services, their images (MySQL 8.4 LTS, RabbitMQ 4) and how they depend on each other.
func TestComposeServices(t *testing.T) {
	c := loadCompose(t)
	images := map[string]string{
		"mysql-primary": "mysql:8.4", "mysql-replica": "mysql:8.4", "replica-setup": "mysql:8.4",
		"rabbitmq": "rabbitmq:4.", "redis": "redis:",
	}
	for name, prefix := range images {
		if s, ok := c.Services[name]; !ok || !strings.HasPrefix(s.Image, prefix) {
			t.Errorf("service %s: image %q, want %s*", name, s.Image, prefix)
		}
	}
	for _, name := range []string{"relay", "inventory", "demo"} {
		if s, ok := c.Services[name]; !ok || s.Build == nil {
			t.Errorf("service %s: want one built from this repository", name)
		}
	}
	for name, s := range c.Services {
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which is not a service", name, dep)
			}
		}
		for _, v := range s.Volumes {
			host, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(host, "./") {
				if _, err := os.Stat(testenv.RepoPath(strings.TrimPrefix(host, "./"))); err != nil {
					t.Errorf("service %s mounts %s: %v", name, host, err)
				}
			}
		}
		if s.Build != nil && s.Build.Dockerfile != "" {
			if _, err := os.Stat(testenv.RepoPath(s.Build.Dockerfile)); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		}
	}
	if args := c.Services["relay"].Build.Args; args["VERSION"] == "" || args["COMMIT"] == "" {
		t.Errorf("relay build args %v: want VERSION and COMMIT (what binlog-relay version prints)", args)
	}
	if dep := c.Services["relay"].DependsOn["replica-setup"].Condition; dep != "service_completed_successfully" {
		t.Errorf("the relay starts on %q of replica-setup: want service_completed_successfully", dep)
	}
}

// What `binlog-relay check` asks of the source: every server variable it reads is set by
// a flag on both MySQL services, the replica logs what it applies, and GTIDs are on.
func TestComposeMySQLFlagsSatisfyCheck(t *testing.T) {
	c := loadCompose(t)
	// The checks live in internal/preflight.
	files, err := filepath.Glob(testenv.RepoPath("internal/preflight/*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no internal/preflight/*.go: %v", err)
	}
	var src []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	// Each variable check reads, and the flag (with value) that satisfies it on MySQL 8.4.
	flags := map[string]string{
		"log_bin":             "--log-bin",
		"binlog_format":       "--binlog-format=ROW",
		"binlog_row_image":    "--binlog-row-image=FULL",
		"binlog_row_metadata": "--binlog-row-metadata=FULL",
		"log_slave_updates":   "--log-replica-updates=ON",
		"log_replica_updates": "--log-replica-updates=ON",
		"gtid_mode":           "--gtid-mode=ON",
	}
	read := regexp.MustCompile(`variable\(ctx, s\.Source, "([a-z_]+)"\)`).FindAllStringSubmatch(string(src), -1)
	if len(read) < 5 {
		t.Fatalf("found only %d server variables read in internal/preflight", len(read))
	}
	need := []string{"--enforce-gtid-consistency=ON"} // MySQL refuses gtid-mode=ON without it
	for _, m := range read {
		f, ok := flags[m[1]]
		if !ok {
			t.Errorf("internal/preflight reads %s: add the flag that sets it to this test and to docker-compose.yml", m[1])
			continue
		}
		need = append(need, f)
	}
	ids := map[string]string{}
	for _, name := range []string{"mysql-primary", "mysql-replica"} {
		cmd := c.Services[name].Command
		for _, f := range need {
			if !slices.ContainsFunc(cmd, func(a string) bool { return a == f || strings.HasPrefix(a, f+"=") }) {
				t.Errorf("%s: no %s", name, f)
			}
		}
		for _, a := range cmd {
			if v, ok := strings.CutPrefix(a, "--server-id="); ok {
				if other, dup := ids[v]; dup {
					t.Errorf("%s and %s share server-id %s", name, other, v)
				}
				ids[v] = name
			}
		}
	}
	if len(ids) != 2 {
		t.Errorf("server ids %v: want one on each server", ids)
	}
}

// The relay's config names the services, the users and passwords they were set up with,
// and the database the tables are in.
func TestComposeRelayConfigMatchesServices(t *testing.T) {
	c := loadCompose(t)
	relay := c.Services["relay"]
	cfgPath := "/etc/binlog-relay/relay.yaml" // the Dockerfile's CMD reads it
	df, _ := os.ReadFile(testenv.RepoPath("Dockerfile"))
	if !strings.Contains(string(df), `"--config", "`+cfgPath+`"`) {
		t.Fatalf("the Dockerfile's CMD no longer reads %s", cfgPath)
	}
	host := ""
	for _, v := range relay.Volumes {
		if h, rest, _ := strings.Cut(v, ":"); strings.HasPrefix(rest, cfgPath+":") || rest == cfgPath {
			host = strings.TrimPrefix(h, "./")
		}
	}
	if host == "" {
		t.Fatalf("relay volumes %v: nothing mounted at %s", relay.Volumes, cfgPath)
	}
	raw, err := os.ReadFile(testenv.RepoPath(host))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(raw, func(k string) (string, bool) { v, ok := relay.Environment[k]; return v, ok })
	if err != nil {
		t.Fatalf("%s with the relay service's environment: %v", host, err)
	}

	primary, replica := c.Services["mysql-primary"], c.Services["mysql-replica"]
	if cfg.Source.Host != "mysql-replica" || cfg.Primary.Host != "mysql-primary" || cfg.Source.Port != 3306 || cfg.Primary.Port != 3306 {
		t.Errorf("source %s:%d, primary %s:%d: want mysql-replica:3306 and mysql-primary:3306",
			cfg.Source.Host, cfg.Source.Port, cfg.Primary.Host, cfg.Primary.Port)
	}
	if !slices.Contains(replica.Command, "--skip-replica-start") || slices.Contains(primary.Command, "--skip-replica-start") {
		t.Error("mysql-replica should be the replica (started by replica-setup), mysql-primary the primary")
	}
	setup := strings.Join(c.Services["replica-setup"].Command, " ")
	if !strings.Contains(setup, "-h "+cfg.Source.Host) || !strings.Contains(setup, "SOURCE_HOST='"+cfg.Primary.Host+"'") {
		t.Errorf("replica-setup does not make %s a replica of %s:\n%s", cfg.Source.Host, cfg.Primary.Host, setup)
	}
	// The relay's MySQL user, as the primary's init script creates it (schema/grants.sql).
	users := mysqlUsers(t, primary)
	for _, m := range []config.MySQL{cfg.Source, cfg.Primary} {
		if pw, ok := users[m.User]; !ok || pw != m.Password {
			t.Errorf("MySQL user %s: created with another password, or not at all (users %v)", m.User, keysOf(users))
		}
	}
	initSQL := initScripts(t, primary)
	for _, g := range []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '" + cfg.Source.User + "'@'%'"} {
		if !strings.Contains(initSQL, g) {
			t.Errorf("the primary's init scripts lack %s", g)
		}
	}
	for _, tb := range cfg.Tables {
		if tb.Schema != primary.Environment["MYSQL_DATABASE"] {
			t.Errorf("table %s: schema is not MYSQL_DATABASE %q", tb.FullName(), primary.Environment["MYSQL_DATABASE"])
		}
		if !strings.Contains(initSQL, "CREATE TABLE IF NOT EXISTS "+tb.Name+" ") {
			t.Errorf("table %s: no init script creates it", tb.FullName())
		}
		if !strings.Contains(initSQL, "GRANT SELECT, UPDATE ON "+tb.Schema+".* TO '"+cfg.Primary.User+"'@'%'") {
			t.Errorf("table %s: the relay user may not SELECT and UPDATE it", tb.FullName())
		}
	}

	// The broker: the rabbitmq service, a user of the definitions with this password.
	u, err := url.Parse(cfg.Broker.URL)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	defs := loadDefinitions(t)
	if u.Hostname() != "rabbitmq" || u.Port() != "5672" {
		t.Errorf("broker.url host %s: want rabbitmq:5672", u.Host)
	}
	defs.checkUser(t, u.User.Username(), pw, "relay")

	if h, p, _ := net.SplitHostPort(cfg.Redis.Addr); h != "redis" || p != "6379" {
		t.Errorf("redis.addr %s: want redis:6379", cfg.Redis.Addr)
	}
	addr, _ := cfg.HTTP.ListenAddr()
	if _, port, _ := net.SplitHostPort(addr); !slices.ContainsFunc(relay.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+port) }) {
		t.Errorf("http.addr %s: its port is not published (ports %v)", addr, relay.Ports)
	}
}

// mysqlUsers reads CREATE USER ... IDENTIFIED BY from the init scripts of a MySQL service.
func mysqlUsers(t *testing.T, s composeService) map[string]string {
	users := map[string]string{}
	re := regexp.MustCompile(`CREATE USER IF NOT EXISTS '([^']+)'@'%' IDENTIFIED BY '([^']*)'`)
	for _, m := range re.FindAllStringSubmatch(initScripts(t, s), -1) {
		users[m[1]] = m[2]
	}
	return users
}

// initScripts concatenates the files a MySQL service runs at its first start.
func initScripts(t *testing.T, s composeService) string {
	t.Helper()
	var all strings.Builder
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[1], "/docker-entrypoint-initdb.d/") {
			raw, err := os.ReadFile(testenv.RepoPath(strings.TrimPrefix(parts[0], "./")))
			if err != nil {
				t.Fatal(err)
			}
			all.Write(raw)
			all.WriteString("\n")
		}
	}
	return all.String()
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

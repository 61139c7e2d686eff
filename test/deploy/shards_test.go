package deploy

import (
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// -update-golden rewrites testdata/chart-golden/*.golden.yaml from the chart as it renders
// now. Only for a change meant to alter what an existing install gets: the point of the
// files is that a change to the templates leaves those installs byte for byte as they are.
var updateGolden = flag.Bool("update-golden", false, "rewrite test/deploy/testdata/chart-golden from the current chart")

const goldenDir = "test/deploy/testdata/chart-golden"

// Without shards, every object renders exactly as it did before shards existed, for each
// values file of testdata/chart-golden (ci/ha-values.yaml plus that file). The files were
// rendered from the chart before the shards change; an existing install upgraded to this
// chart gets the same objects, names and selectors (a Deployment's selector is immutable:
// a changed one would fail the upgrade).
func TestChartRenderUnchangedWithoutShards(t *testing.T) {
	valueFiles, err := filepath.Glob(testenv.RepoPath(goldenDir + "/*.values.yaml"))
	if err != nil || len(valueFiles) == 0 {
		t.Fatalf("no %s/*.values.yaml (%v)", goldenDir, err)
	}
	for _, vf := range valueFiles {
		name := strings.TrimSuffix(filepath.Base(vf), ".values.yaml")
		t.Run(name, func(t *testing.T) {
			out, errb, err := tool(t, "HELM", "template", releaseNm, chartDir, "-f", ciValues,
				"-f", filepath.ToSlash(strings.TrimPrefix(vf, testenv.RepoPath(""))))
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errb)
			}
			got := normaliseRender(t, out)
			goldenPath := strings.TrimSuffix(vf, ".values.yaml") + ".golden.yaml"
			if *updateGolden {
				if err := os.WriteFile(goldenPath, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenPath)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("the render with %s differs from %s:\n%s", filepath.Base(vf), filepath.Base(goldenPath), firstDiff(string(want), got))
			}
		})
	}
}

// normaliseRender replaces what changes without a template changing: the chart's version
// and appVersion (bumped at each release) and the alert rules the PrometheusRule copies
// from deploy/prometheus/alerts.yml (TestChartPrometheusRuleIsTheAlertsFile checks those).
func normaliseRender(t *testing.T, out string) string {
	t.Helper()
	raw, err := os.ReadFile(testenv.RepoPath(chartDir + "/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Name       string `yaml:"name"`
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	alerts, err := os.ReadFile(testenv.RepoPath("deploy/prometheus/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	// What `{{ .Files.Get "files/alerts.yml" | nindent 2 }}` followed by `{{- end }}` leaves.
	block := strings.TrimRightFunc("  "+strings.ReplaceAll(string(alerts), "\n", "\n  "), unicode.IsSpace)
	chartLabel := strings.ReplaceAll(chart.Name+"-"+chart.Version, "+", "_")
	return strings.NewReplacer(
		block, "  # @ALERTS@: deploy/prometheus/alerts.yml, indented by two",
		"helm.sh/chart: "+chartLabel+"\n", "helm.sh/chart: "+chart.Name+"-@VERSION@\n",
		`app.kubernetes.io/version: "`+chart.AppVersion+`"`, `app.kubernetes.io/version: "@APP_VERSION@"`,
		`/binlog-relay:`+chart.AppVersion+`"`, `/binlog-relay:@APP_VERSION@"`,
	).Replace(out)
}

// firstDiff shows the first line where want and got part, with a little context.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		if i < len(w) && i < len(g) && w[i] == g[i] {
			continue
		}
		from := max(i-3, 0)
		var b strings.Builder
		for j := from; j < i; j++ {
			b.WriteString("  " + w[j] + "\n")
		}
		if i < len(w) {
			b.WriteString("- " + w[i] + "\n")
		}
		if i < len(g) {
			b.WriteString("+ " + g[i] + "\n")
		}
		b.WriteString("(line " + strconv.Itoa(i+1) + ")")
		return b.String()
	}
	return "(no line differs: only the final newline)"
}

const shardsValues = "test/deploy/testdata/shards.values.yaml"

// Two shards from one release: a relay name each, with its own objects, config and pods, and
// the release-wide objects once.
func TestChartShards(t *testing.T) {
	r, err := renderFiles(t, []string{shardsValues})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		replicas              int
		source, primary       string
		sourcePort            int
		ha                    bool
		strategy, tableSchema string
		logLevel              string // "" when the shard removed the shared log section
	}
	shards := map[string]want{
		"orders-eu": {2, "mysql-eu-replica", "mysql-eu-primary", 3306, true, "RollingUpdate", "shop", "debug"},
		"orders-us": {1, "mysql-us-replica", "mysql-us-primary", 3307, false, "Recreate", "shop_us", ""},
	}
	if len(r.Deployments) != len(shards) || len(r.ConfigMaps) != len(shards) || len(r.Services) != len(shards) {
		t.Fatalf("%d Deployments, %d ConfigMaps, %d Services: want %d of each", len(r.Deployments), len(r.ConfigMaps), len(r.Services), len(shards))
	}
	// Shared: one Secret, ServiceAccount, ServiceMonitor and PrometheusRule for the release.
	if len(r.Secrets) != 1 || len(r.ServiceAccounts) != 1 || len(r.ServiceMonitors) != 1 || len(r.PrometheusRules) != 1 {
		t.Errorf("Secrets %v, %d ServiceAccounts, %d ServiceMonitors, %d PrometheusRules: want one of each",
			keys2(r.Secrets), len(r.ServiceAccounts), len(r.ServiceMonitors), len(r.PrometheusRules))
	}
	// A budget only where a shard runs more than one relay.
	if len(r.PDBs) != 1 || r.PDBs[0].Metadata.Name != "shop-binlog-relay-orders-eu" {
		t.Errorf("PodDisruptionBudgets %+v: want one, for orders-eu (orders-us runs one relay)", r.PDBs)
	}

	checksums := map[string]string{}
	for shard, w := range shards {
		name := "shop-binlog-relay-" + shard
		d, _ := r.deploymentNamed(t, name)
		pods := d.Spec.Template.Metadata.Labels
		if pods["binlog-relay/shard"] != shard {
			t.Errorf("%s: pod labels %v: want binlog-relay/shard=%s", name, pods, shard)
		}
		if d.Spec.Replicas != w.replicas || d.Spec.Strategy.Type != w.strategy {
			t.Errorf("%s: %d replicas, strategy %s: want %d, %s", name, d.Spec.Replicas, d.Spec.Strategy.Type, w.replicas, w.strategy)
		}
		checksums[d.Spec.Template.Metadata.Annotations["checksum/config"]] = shard

		// The relay's config, loaded and linted as the relay would: its own name and servers,
		// the shared Redis, broker and Secret.
		cfg := loadRenderedConfigOf(t, r, d)
		if cfg.Name != shard || cfg.Source.Host != w.source || cfg.Source.Port != w.sourcePort || cfg.Primary.Host != w.primary || cfg.HA.Enabled != w.ha {
			t.Errorf("%s: name %q, source %s:%d, primary %s, ha %v: want %q, %s:%d, %s, %v", name,
				cfg.Name, cfg.Source.Host, cfg.Source.Port, cfg.Primary.Host, cfg.HA.Enabled, shard, w.source, w.sourcePort, w.primary, w.ha)
		}
		brokerHost := "" // not the URL: the relay has put the password in it
		if u, err := url.Parse(cfg.Broker.URL); err == nil {
			brokerHost = u.Host
		}
		if cfg.Redis.Addr != "redis:6379" || brokerHost != "rabbitmq:5672" || cfg.Source.User != "relay" {
			t.Errorf("%s: redis %q, broker host %q, source user %q: want the shared ones", name, cfg.Redis.Addr, brokerHost, cfg.Source.User)
		}
		if got := cfg.RedisKeys().Checkpoint(); got != "binlog-relay:"+shard+":checkpoint" {
			t.Errorf("%s: checkpoint key %s: want one of its own", name, got)
		}

		// The file itself: the merge (a list replaced, null removing a shared section).
		var file struct {
			Tables []map[string]any `yaml:"tables"`
			Log    map[string]any   `yaml:"log"`
		}
		if err := yaml.Unmarshal([]byte(r.ConfigMaps[name].Data["relay.yaml"]), &file); err != nil {
			t.Fatalf("%s relay.yaml: %v", name, err)
		}
		if len(file.Tables) != 1 || file.Tables[0]["schema"] != w.tableSchema {
			t.Errorf("%s: tables %v: want one, schema %s", name, file.Tables, w.tableSchema)
		}
		if got, _ := file.Log["level"].(string); got != w.logLevel || (w.logLevel == "" && file.Log != nil) {
			t.Errorf("%s: log %v: want level %q", name, file.Log, w.logLevel)
		}
	}
	if len(checksums) != len(shards) {
		t.Errorf("checksum/config annotations %v: want one per shard's config", checksums)
	}

	// Each selector picks its own shard's pods and no other's.
	podsOf := map[string]map[string]string{}
	for _, d := range r.Deployments {
		podsOf[d.Metadata.Name] = d.Spec.Template.Metadata.Labels
	}
	selectors := map[string]map[string]string{}
	for _, d := range r.Deployments {
		selectors["Deployment "+d.Metadata.Name] = d.Spec.Selector.MatchLabels
		if a := d.Spec.Template.Spec.Affinity; a != nil && len(a.PodAntiAffinity.Preferred) == 1 {
			selectors["anti-affinity of "+d.Metadata.Name] = a.PodAntiAffinity.Preferred[0].PodAffinityTerm.LabelSelector.MatchLabels
		} else {
			t.Errorf("Deployment %s: affinity %+v: want the soft anti-affinity", d.Metadata.Name, a)
		}
	}
	for _, s := range r.Services {
		selectors["Service "+s.Metadata.Name] = s.Spec.Selector
	}
	for _, p := range r.PDBs {
		selectors["PodDisruptionBudget "+p.Metadata.Name] = p.Spec.Selector.MatchLabels
	}
	for what, sel := range selectors {
		owner := what[strings.LastIndex(what, " ")+1:]
		for pods, labels := range podsOf {
			if matches := len(sel) > 0 && reflect.DeepEqual(sel, subset(labels, sel)); matches != (pods == owner) {
				t.Errorf("%s %v: matches the pods of %s: %v", what, sel, pods, matches)
			}
		}
	}
	// The one ServiceMonitor scrapes every shard's Service.
	sm := r.ServiceMonitors[0].Spec.Selector.MatchLabels
	for _, s := range r.Services {
		if len(sm) == 0 || !reflect.DeepEqual(sm, subset(s.Metadata.Labels, sm)) {
			t.Errorf("ServiceMonitor selector %v misses Service %s (labels %v)", sm, s.Metadata.Name, s.Metadata.Labels)
		}
	}
}

// What helm refuses to render with shards, and that the error says which shard and why.
func TestChartShardsRefuseBrokenValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"duplicate name", []string{"shards[1].name=orders-eu"},
			`shards[1] (orders-eu): config.name "orders-eu" is also shards[0] (orders-eu)'s: the relay name keys the checkpoint and the leader lease in Redis`},
		{"duplicate relay name by a shard's config", []string{"shards[1].config.name=orders-eu"},
			`shards[1] (orders-us): config.name "orders-eu" is also shards[0] (orders-eu)'s`},
		{"not a Kubernetes name", []string{"shards[0].name=Orders_EU"},
			`shards[0].name: "Orders_EU" must be lower-case letters, digits and '-'`},
		{"no name", []string{"shards[0].name=null"}, `shards[0].name: "" must be lower-case letters`},
		{"not a relay name", []string{"shards[1].config.name=orders us"},
			`shards[1] (orders-us): config.name: "orders us" is not a valid relay name`},
		{"name too long", []string{"shards[0].name=" + strings.Repeat("x", 46)},
			"characters; Kubernetes allows 63"},
		{"misspelt key", []string{"shards[0].conifg.source.host=x"},
			"shards[0].conifg: not a shard key (name, config, replicaCount)"},
		{"same server_id", []string{"shards[1].config.source.server_id=4201"},
			"shards[1] (orders-us): config.source.server_id 4201 is also shards[0] (orders-eu)'s"},
		{"same source and tables", []string{"shards[1].config.source.host=mysql-eu-replica", "shards[1].config.source.port=3306", "shards[1].config.tables[0].schema=shop"},
			"shards[1] (orders-us): config.source (mysql-eu-replica:3306) and config.tables are also shards[0] (orders-eu)'s"},
		{"same checkpoint key", []string{"config.checkpoint.key=orders"},
			"shards[1] (orders-us): config.checkpoint.key is also shards[0] (orders-eu)'s"},
		// The checks of a single relay, on each shard's merged config.
		{"two relays of a shard without the lease", []string{"shards[1].replicaCount=2"},
			"shards[1] (orders-us): replicaCount: more than one relay needs config.ha.enabled: true"},
		{"a shard's password not in the Secret", []string{"secret.data.us-source-password="},
			"shards[1] (orders-us): secret.data.us-source-password: config.source.password_file reads it"},
		{"a shard's loopback http.addr", []string{"shards[0].config.http.addr=127.0.0.1:9464"},
			`shards[0] (orders-eu): config.http.addr: "127.0.0.1:9464" must listen on all interfaces`},
		{"not a list", []string{"shards=orders-eu"}, "shards: a list of relays"},
	} {
		_, err := renderFiles(t, []string{shardsValues}, tc.set...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s (%v): got %v, want an error containing %q", tc.name, tc.set, err, tc.want)
		}
	}
}

// helm lint --strict, which fails on a template reading a key that is not there, passes
// with shards too.
func TestChartLintsWithShards(t *testing.T) {
	out := mustTool(t, "HELM", "lint", "--strict", chartDir, "-f", ciValues, "-f", shardsValues)
	if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
		t.Fatalf("helm lint:\n%s", out)
	}
}

// The two-shard example of docs/kubernetes.md ("Several databases") renders as the page says:
// the objects it names, each shard's config with its own name and servers, linted.
func TestChartShardsDocExample(t *testing.T) {
	raw, err := os.ReadFile(testenv.RepoPath("docs/kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	at := strings.Index(doc, "### Several databases")
	if at < 0 {
		t.Fatal(`docs/kubernetes.md: no section "### Several databases"`)
	}
	block := regexp.MustCompile("(?ms)^```yaml\n(.*?)^```").FindStringSubmatch(doc[at:])
	if block == nil {
		t.Fatal(`docs/kubernetes.md, "Several databases": no yaml block`)
	}
	var example struct {
		Shards []struct {
			Name   string `yaml:"name"`
			Config struct {
				Source  struct{ Host string } `yaml:"source"`
				Primary struct{ Host string } `yaml:"primary"`
			} `yaml:"config"`
		} `yaml:"shards"`
	}
	if err := yaml.Unmarshal([]byte(block[1]), &example); err != nil || len(example.Shards) < 2 {
		t.Fatalf("the example: %v, %d shards; want two or more", err, len(example.Shards))
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(block[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	// The Secret's keys, as the page's --set-file flags give them.
	args := []string{"template", "orders-relay", chartDir, "-f", values}
	for _, m := range regexp.MustCompile(`--set-file (secret\.data\.[a-z-]+)=`).FindAllStringSubmatch(doc[at:], -1) {
		args = append(args, "--set", m[1]+"=from-a-file")
	}
	out, errb, err := tool(t, "HELM", args...)
	if err != nil {
		t.Fatalf("helm template with the example and its --set-file keys: %v\n%s", err, errb)
	}
	r, err := decode(t, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Deployments) != len(example.Shards) {
		t.Errorf("%d Deployments for %d shards", len(r.Deployments), len(example.Shards))
	}
	for _, s := range example.Shards {
		name := "orders-relay-binlog-relay-" + s.Name
		if !strings.Contains(doc[at:], "`"+name+"`") {
			t.Errorf("the page does not name %s, the objects of shard %s", name, s.Name)
		}
		d, _ := r.deploymentNamed(t, name)
		cfg := loadRenderedConfigOf(t, r, d)
		if cfg.Name != s.Name || cfg.Source.Host != s.Config.Source.Host || cfg.Primary.Host != s.Config.Primary.Host {
			t.Errorf("%s: name %q, source %s, primary %s: want %q, %s, %s", name, cfg.Name, cfg.Source.Host, cfg.Primary.Host,
				s.Name, s.Config.Source.Host, s.Config.Primary.Host)
		}
	}
}

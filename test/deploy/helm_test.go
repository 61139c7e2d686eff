package deploy

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/relay"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

func TestChartLints(t *testing.T) {
	out := mustTool(t, "HELM", "lint", "--strict", chartDir, "-f", ciValues)
	if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
		t.Fatalf("helm lint:\n%s", out)
	}
}

// The chart as docs/kubernetes.md installs it: every object decodes, and the pieces point
// at each other the way the relay needs.
func TestChartWiring(t *testing.T) {
	r := mustRender(t)
	d, c := r.deployment(t)
	cfg := loadRenderedConfig(t, r)
	pod := d.Spec.Template.Spec

	if d.Spec.Replicas != 2 || !cfg.HA.Enabled {
		t.Errorf("replicas %d, ha.enabled %v: want 2 relays with the leader lease", d.Spec.Replicas, cfg.HA.Enabled)
	}
	if s := d.Spec.Strategy; s.Type != "RollingUpdate" || s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable != 0 {
		t.Errorf("strategy %+v: want a rolling update that starts the new standby before stopping an old relay", s)
	}
	if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, subset(d.Spec.Template.Metadata.Labels, d.Spec.Selector.MatchLabels)) {
		t.Errorf("Deployment selector %v does not match its pod labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels)
	}

	// Probes and the Service reach http.addr.
	addr, _ := cfg.HTTP.ListenAddr()
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		t.Fatalf("http.addr %q: want it listening on every interface", addr)
	}
	wantPort, _ := strconv.Atoi(port)
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, p := range map[string]probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]
		if p.HTTPGet == nil || p.HTTPGet.Path != want {
			t.Errorf("%s probe %+v: want GET %s", name, p.HTTPGet, want)
			continue
		}
		if got := ports[p.HTTPGet.Port]; got != wantPort {
			t.Errorf("%s probe port %q is container port %d, http.addr listens on %d", name, p.HTTPGet.Port, got, wantPort)
		}
	}
	if len(r.Services) != 1 || len(r.Services[0].Spec.Ports) != 1 {
		t.Fatalf("want one Service with one port, got %+v", r.Services)
	}
	svc := r.Services[0]
	if got := ports[svc.Spec.Ports[0].TargetPort]; got != wantPort {
		t.Errorf("Service targetPort %q is container port %d, http.addr listens on %d", svc.Spec.Ports[0].TargetPort, got, wantPort)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, subset(d.Spec.Template.Metadata.Labels, svc.Spec.Selector)) {
		t.Errorf("Service selector %v does not match the pod labels", svc.Spec.Selector)
	}

	// The drain fits in the grace period.
	rc := relay.Config{DrainTimeout: cfg.Relay.DrainTimeout}
	rc.Defaults()
	grace := pod.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= rc.DrainTimeout {
		t.Errorf("terminationGracePeriodSeconds %s: want more than relay.drain_timeout %s", intp(grace), rc.DrainTimeout)
	}

	// One relay at a time may be disrupted, and the budget covers the relays.
	if len(r.PDBs) != 1 || r.PDBs[0].Spec.MaxUnavailable == nil || *r.PDBs[0].Spec.MaxUnavailable >= d.Spec.Replicas {
		t.Errorf("PodDisruptionBudgets %+v: want one leaving at least one of %d relays up", r.PDBs, d.Spec.Replicas)
	} else if sel := r.PDBs[0].Spec.Selector.MatchLabels; !reflect.DeepEqual(sel, subset(d.Spec.Template.Metadata.Labels, sel)) {
		t.Errorf("PodDisruptionBudget selector %v does not match the pod labels", sel)
	}

	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	if pod.SecurityContext.FSGroup == nil || !pod.SecurityContext.RunAsNonRoot {
		t.Errorf("pod securityContext %+v: a non-root relay needs fsGroup to read the Secret's files", pod.SecurityContext)
	}

	// The ServiceMonitor scrapes the Service's port.
	if len(r.ServiceMonitors) != 1 || len(r.ServiceMonitors[0].Spec.Endpoints) != 1 {
		t.Fatalf("want one ServiceMonitor with one endpoint, got %+v", r.ServiceMonitors)
	}
	sm := r.ServiceMonitors[0]
	if ep := sm.Spec.Endpoints[0]; ep.Port != svc.Spec.Ports[0].Name || ep.Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoint %+v: want port %q, path /metrics", ep, svc.Spec.Ports[0].Name)
	}
	if sel := sm.Spec.Selector.MatchLabels; len(sel) == 0 || !reflect.DeepEqual(sel, subset(svc.Metadata.Labels, sel)) {
		t.Errorf("ServiceMonitor selector %v does not match the Service's labels %v", sel, svc.Metadata.Labels)
	}
	if sm.Metadata.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v: serviceMonitor.labels not applied", sm.Metadata.Labels)
	}
}

// The PrometheusRule holds deploy/prometheus/alerts.yml, rule for rule.
func TestChartPrometheusRuleIsTheAlertsFile(t *testing.T) {
	r := mustRender(t)
	raw, err := os.ReadFile(testenv.RepoPath("deploy/prometheus/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var want ruleFile
	d := yaml.NewDecoder(strings.NewReader(string(raw)))
	d.KnownFields(true)
	if err := d.Decode(&want); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	if len(r.PrometheusRules) != 1 {
		t.Fatalf("want one PrometheusRule, got %d", len(r.PrometheusRules))
	}
	got := r.PrometheusRules[0].Spec
	if len(want.Groups) == 0 || len(want.Groups[0].Rules) == 0 {
		t.Fatal("alerts.yml has no rules")
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the PrometheusRule's groups differ from deploy/prometheus/alerts.yml:\n got %+v\nwant %+v", got, want)
	}
}

// loadRenderedConfig finds the file the container's --config names among the mounted
// files, checks that every *_file key names a mounted file, and loads the config as the
// relay would (with those files in a temporary directory), then lints it.
func loadRenderedConfig(t *testing.T, r *rendered) *config.Config {
	t.Helper()
	d, _ := r.deployment(t)
	return loadRenderedConfigOf(t, r, d)
}

// loadRenderedConfigOf is loadRenderedConfig for one of several Deployments (shards).
func loadRenderedConfigOf(t *testing.T, r *rendered, d deployment) *config.Config {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	files, external := r.filesOf(t, d)
	cfgPath := ""
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "run" || cfgPath == "" {
		t.Fatalf("container args %q: want run --config PATH", c.Args)
	}
	text, ok := files[cfgPath]
	if !ok {
		t.Fatalf("--config %s is not a mounted file (mounted: %v)", cfgPath, keys(files))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("%s: %v", cfgPath, err)
	}
	root := t.TempDir()
	fileKeys := 0
	walkFileKeys(&doc, "", func(key string, val *yaml.Node) {
		fileKeys++
		content, ok := files[val.Value]
		if !ok {
			if len(external) > 0 && strings.HasPrefix(val.Value, secretMount(t, d)) {
				content = "from-the-existing-secret" // secret.create=false: the user's Secret
			} else {
				t.Errorf("%s: %s is not a mounted file (mounted: %v)", key, val.Value, keys(files))
				return
			}
		}
		local := filepath.Join(root, filepath.FromSlash(val.Value))
		if err := os.MkdirAll(filepath.Dir(local), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(local, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		val.Value = local
	})
	if fileKeys == 0 {
		t.Errorf("%s has no password_file: passwords must come from the Secret", cfgPath)
	}
	raw, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(raw, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("the rendered config does not load: %v", err)
	}
	for _, p := range preflight.Lint(cfg, app.ConfigChecks()) {
		if p.Severity == preflight.Error {
			t.Errorf("binlog-relay lint: %s", p)
		}
	}
	return cfg
}

// walkFileKeys calls fn for every mapping key ending in _file (password_file, ca_file,
// cert_file, key_file), with its dotted path.
func walkFileKeys(n *yaml.Node, path string, fn func(key string, val *yaml.Node)) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			p := path
			if n.Kind == yaml.SequenceNode {
				p = path + "[" + strconv.Itoa(i) + "]"
			}
			walkFileKeys(c, p, fn)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			p := strings.TrimPrefix(path+"."+k, ".")
			if strings.HasSuffix(k, "_file") && v.Kind == yaml.ScalarNode && v.Value != "" {
				fn(p, v)
				continue
			}
			walkFileKeys(v, p, fn)
		}
	}
}

// secretMount is where the Deployment mounts its Secret volume.
func secretMount(t *testing.T, d deployment) string {
	c := d.Spec.Template.Spec.Containers[0]
	for _, v := range d.Spec.Template.Spec.Volumes {
		for _, m := range c.VolumeMounts {
			if v.Secret != nil && m.Name == v.Name {
				return m.MountPath + "/"
			}
		}
	}
	t.Fatal("no Secret volume is mounted")
	return ""
}

// subset returns the entries of m whose keys are in want.
func subset(m, want map[string]string) map[string]string {
	out := map[string]string{}
	for k := range want {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

func intp(p *int) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(*p)
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

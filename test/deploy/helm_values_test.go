package deploy

import (
	"strings"
	"testing"
)

// terminationGracePeriodSeconds follows relay.drain_timeout, in any Go duration form.
func TestChartGracePeriodFollowsDrainTimeout(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want int
	}{
		{nil, 30 + 15}, // the chart's value, the relay's default
		{[]string{"config.relay.drain_timeout=2m30s"}, 150 + 15},
		{[]string{"config.relay.drain_timeout=1500ms", "extraGracePeriodSeconds=5"}, 2 + 5},
		{[]string{"config.relay.drain_timeout=1h"}, 3600 + 15},
		{[]string{"config.relay=null"}, 30 + 15}, // unset: the relay's default, 30s
	} {
		r := mustRender(t, tc.set...)
		d, _ := r.deployment(t)
		loadRenderedConfig(t, r)
		if got := d.Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got != tc.want {
			t.Errorf("%v: terminationGracePeriodSeconds %s, want %d", tc.set, intp(got), tc.want)
		}
	}
}

// One relay without the lease: replaced, not rolled, and no disruption budget that would
// block every node drain.
func TestChartSingleRelay(t *testing.T) {
	r := mustRender(t, "replicaCount=1", "config.ha.enabled=false")
	d, _ := r.deployment(t)
	cfg := loadRenderedConfig(t, r)
	if d.Spec.Replicas != 1 || cfg.HA.Enabled {
		t.Errorf("replicas %d, ha %v", d.Spec.Replicas, cfg.HA.Enabled)
	}
	if d.Spec.Strategy.Type != "Recreate" {
		t.Errorf("strategy %s: two relays of one name without the lease refuse to run side by side; want Recreate", d.Spec.Strategy.Type)
	}
	if len(r.PDBs) != 0 {
		t.Errorf("a PodDisruptionBudget on a single relay blocks node drains: %+v", r.PDBs)
	}
}

// An existing Secret is mounted as it is, and the chart creates none.
func TestChartExistingSecret(t *testing.T) {
	r := mustRender(t, "secret.create=false", "secret.name=shop-relay-passwords")
	if len(r.Secrets) != 0 {
		t.Errorf("secret.create=false rendered Secrets %v", keys2(r.Secrets))
	}
	d, _ := r.deployment(t)
	found := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		found = found || (v.Secret != nil && v.Secret.SecretName == "shop-relay-passwords")
	}
	if !found {
		t.Errorf("volumes %+v: the existing Secret is not mounted", d.Spec.Template.Spec.Volumes)
	}
	loadRenderedConfig(t, r)
}

// The console is off unless asked for; on, with its token in the Secret, the relay takes
// the rendered config.
func TestChartConsole(t *testing.T) {
	if cfg := loadRenderedConfig(t, mustRender(t)); cfg.HTTP.Console {
		t.Error("the chart turns the console on by default")
	}
	cfg := loadRenderedConfig(t, mustRender(t, "config.http.console=true",
		"config.http.console_token_file=/etc/binlog-relay/secrets/console-token", "secret.data.console-token=0123456789abcdef0123"))
	if !cfg.HTTP.Console || cfg.HTTP.ConsoleToken == "" {
		t.Errorf("console on: console %v, token read %v", cfg.HTTP.Console, cfg.HTTP.ConsoleToken != "")
	}
}

// What helm refuses to render, and that the error says what to set.
func TestChartRefusesBrokenValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"missing password", []string{"secret.data.source-password="}, "secret.data.source-password: config.source.password_file reads it"},
		{"two relays without the lease", []string{"config.ha.enabled=false"}, "replicaCount: more than one relay needs config.ha.enabled: true"},
		{"loopback http.addr", []string{"config.http.addr=127.0.0.1:9464"}, `config.http.addr: "127.0.0.1:9464" must listen on all interfaces`},
		{"no http.addr", []string{"config.http=null"}, `config.http.addr: "" must listen on all interfaces`},
		{"drain_timeout without a unit", []string{"config.relay.drain_timeout=30"}, `config.relay.drain_timeout: "30" is not a duration`},
		{"existing Secret without a name", []string{"secret.create=false"}, "secret.name: the existing Secret to mount"},
		{"console token not in the Secret", []string{"config.http.console=true", "config.http.console_token_file=/etc/binlog-relay/secrets/console-token"},
			"secret.data.console-token: config.http.console_token_file reads it"},
	} {
		_, err := render(t, tc.set...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s (%v): got %v, want an error containing %q", tc.name, tc.set, err, tc.want)
		}
	}
	// The chart's defaults alone name the passwords to set.
	_, errb, err := tool(t, "HELM", "template", releaseNm, chartDir)
	if err == nil || !strings.Contains(errb, "secret.data.source-password") {
		t.Errorf("helm template with the default values: %v %s; want it to ask for secret.data.source-password", err, errb)
	}
}

func keys2[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

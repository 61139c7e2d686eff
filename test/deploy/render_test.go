package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const (
	chartDir  = "deploy/helm/binlog-relay"
	ciValues  = chartDir + "/ci/ha-values.yaml"
	releaseNm = "shop"
)

// rendered is what `helm template` produced, decoded by kind.
type rendered struct {
	ConfigMaps      map[string]configMap
	Secrets         map[string]secret
	Services        []service
	Deployments     []deployment
	PDBs            []pdb
	ServiceMonitors []serviceMonitor
	PrometheusRules []prometheusRule
	ServiceAccounts []serviceAccount
}

// render runs helm template with ci/ha-values.yaml and the --set flags given.
func render(t *testing.T, sets ...string) (*rendered, error) {
	t.Helper()
	return renderFiles(t, nil, sets...)
}

// renderFiles is render with values files (paths from the repository root) after
// ci/ha-values.yaml, then the --set flags.
func renderFiles(t *testing.T, valueFiles []string, sets ...string) (*rendered, error) {
	t.Helper()
	args := []string{"template", releaseNm, chartDir, "-f", ciValues}
	for _, f := range valueFiles {
		args = append(args, "-f", f)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, errb, err := tool(t, "HELM", args...)
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, errb)
	}
	return decode(t, out)
}

func mustRender(t *testing.T, sets ...string) *rendered {
	t.Helper()
	r, err := render(t, sets...)
	if err != nil {
		t.Fatalf("helm template %v: %v", sets, err)
	}
	return r
}

// decode reads every document strictly into the type of its kind; an unknown kind or
// field is an error.
func decode(t *testing.T, stream string) (*rendered, error) {
	t.Helper()
	r := &rendered{ConfigMaps: map[string]configMap{}, Secrets: map[string]secret{}}
	dec := yaml.NewDecoder(strings.NewReader(stream))
	for i := 0; ; i++ {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			continue // an empty document (a template rendered to nothing)
		}
		raw, err := yaml.Marshal(&doc)
		if err != nil {
			return nil, err
		}
		var head object
		if err := yaml.Unmarshal(raw, &head); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		strict := func(into any) error {
			d := yaml.NewDecoder(bytes.NewReader(raw))
			d.KnownFields(true)
			if err := d.Decode(into); err != nil {
				return fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
			}
			return nil
		}
		switch kind := head.APIVersion + " " + head.Kind; kind {
		case "v1 ConfigMap":
			var o configMap
			err = strict(&o)
			r.ConfigMaps[o.Metadata.Name] = o
		case "v1 Secret":
			var o secret
			err = strict(&o)
			r.Secrets[o.Metadata.Name] = o
		default:
			if add, ok := r.lists()[kind]; ok {
				err = add(strict)
			} else {
				err = fmt.Errorf("document %d: unexpected %s (%s)", i, kind, head.Metadata.Name)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// lists are the kinds kept in a list, by apiVersion and kind, each with
// how to decode a document (strictly) and append it.
func (r *rendered) lists() map[string]func(strict func(any) error) error {
	return map[string]func(strict func(any) error) error{
		"v1 Service":                              appendDecoded(&r.Services),
		"v1 ServiceAccount":                       appendDecoded(&r.ServiceAccounts),
		"apps/v1 Deployment":                      appendDecoded(&r.Deployments),
		"policy/v1 PodDisruptionBudget":           appendDecoded(&r.PDBs),
		"monitoring.coreos.com/v1 ServiceMonitor": appendDecoded(&r.ServiceMonitors),
		"monitoring.coreos.com/v1 PrometheusRule": appendDecoded(&r.PrometheusRules),
	}
}

// appendDecoded decodes a document strictly into a new T and appends it to
// list (also on an error, which the caller returns).
func appendDecoded[T any](list *[]T) func(strict func(any) error) error {
	return func(strict func(any) error) error {
		var o T
		err := strict(&o)
		*list = append(*list, o)
		return err
	}
}

// deployment returns the one Deployment and its one container.
func (r *rendered) deployment(t *testing.T) (deployment, container) {
	t.Helper()
	if len(r.Deployments) != 1 || len(r.Deployments[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Deployment with one container, got %d Deployments", len(r.Deployments))
	}
	d := r.Deployments[0]
	return d, d.Spec.Template.Spec.Containers[0]
}

// deploymentNamed returns the Deployment of that name and its one container.
func (r *rendered) deploymentNamed(t *testing.T, name string) (deployment, container) {
	t.Helper()
	for _, d := range r.Deployments {
		if d.Metadata.Name != name {
			continue
		}
		if len(d.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("Deployment %s: want one container, got %d", name, len(d.Spec.Template.Spec.Containers))
		}
		return d, d.Spec.Template.Spec.Containers[0]
	}
	var names []string
	for _, d := range r.Deployments {
		names = append(names, d.Metadata.Name)
	}
	t.Fatalf("no Deployment %s (rendered: %v)", name, names)
	return deployment{}, container{}
}

// files lays the one Deployment's volume mounts out as the kubelet would (filesOf).
func (r *rendered) files(t *testing.T) (files map[string]string, external []string) {
	t.Helper()
	d, _ := r.deployment(t)
	return r.filesOf(t, d)
}

// filesOf lays the container's volume mounts out as the kubelet would: path -> content, for
// the ConfigMaps and Secrets the chart rendered. A mount of a Secret the chart does not
// create (secret.create=false) is listed under external.
func (r *rendered) filesOf(t *testing.T, d deployment) (files map[string]string, external []string) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	volumes := map[string]volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	files = map[string]string{}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Fatalf("volumeMount %s: no volume of that name", m.Name)
		}
		var data map[string]string
		var items []keyToPath
		switch {
		case v.ConfigMap != nil:
			cm, ok := r.ConfigMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("volume %s: ConfigMap %s is not rendered", v.Name, v.ConfigMap.Name)
			}
			data, items = cm.Data, v.ConfigMap.Items
		case v.Secret != nil:
			s, ok := r.Secrets[v.Secret.SecretName]
			if !ok {
				external = append(external, v.Secret.SecretName)
				continue
			}
			data, items = s.StringData, v.Secret.Items
		default:
			continue
		}
		if m.SubPath != "" {
			t.Fatalf("volumeMount %s uses subPath: its files would not follow updates", m.Name)
		}
		if len(items) == 0 {
			for k := range data {
				items = append(items, keyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			content, ok := data[it.Key]
			if !ok {
				t.Fatalf("volume %s: key %s is not in its source", v.Name, it.Key)
			}
			files[path.Join(m.MountPath, it.Path)] = content
		}
	}
	return files, external
}
